from __future__ import annotations

from pathlib import Path

import yaml

from memory.store.storage import Storage
from tests.cli import run_cli


async def test_pairing_list_and_approve_from_the_cli(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"storage": {"data_dir": str(tmp_path / "data")}}))
    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    code = await storage.pairing.request("telegram:77", "telegram", "Quinn")
    await storage.close()

    rc, out, _ = await run_cli("--config", str(config), "pairing", "list")
    assert rc == 0 and code in out and "telegram:77" in out and "Quinn" in out
    rc, _, err = await run_cli("--config", str(config), "pairing", "approve", "NOPE42")
    assert rc == 1 and "no pairing request" in err
    rc, out, _ = await run_cli("--config", str(config), "pairing", "approve", code.lower())
    assert rc == 0 and "approved telegram:77" in out

    storage = await Storage.open(f"sqlite:///{tmp_path}/data/clawgate.db")
    try:
        assert await storage.pairing.is_approved("telegram:77")
    finally:
        await storage.close()
