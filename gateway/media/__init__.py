"""Pictures, files and voice people send (docs/media.md): one policy for every channel.

A channel says where an attachment is (`locate_media`: a URL on the platform's own hosts with the
bot's credentials, or the bytes of a web upload) and which hosts are its own (`media_origins`);
everything else is decided here, once: the size caps per kind, the download (streamed, capped,
only from those hosts), what a file is (by its bytes, not its name), how it reaches the model
(an image part, a file's text framed as quoted data, a transcript) and what the session keeps
(a line saying what was attached: never the bytes).
"""
