"""The database and what lives in it: schema, migrations, sessions, journal, identities, jobs, leases."""
