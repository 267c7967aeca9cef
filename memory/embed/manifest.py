"""What recall knows of an embedding model (DESIGN §7): its query and document prefixes (or, for a
provider that takes them instead, request parameters such as an `input_type`), its dimension and
its calibrated cosine floor, from `embedding_models.json` (see its "about").

A model is found by the id it is configured with. Two other ways lead to the same entry:
- a LiteLLM route to a server that serves a model under its Hugging Face id
  (`hosted_vllm/intfloat/multilingual-e5-small`, `openai/intfloat/multilingual-e5-small`): the id
  after the provider;
- a sentence-transformers model directory (`memory.search.model: /models/multilingual-e5-small`):
  the Hugging Face id in a hub cache path (`models--intfloat--multilingual-e5-small/snapshots/…`),
  else the directory's name when exactly one entry ends with it.
A directory no entry names keeps the prompts it declares itself (config_sentence_transformers.json:
`prompts.query`, and `document`, `passage` or `corpus`) and has no calibrated floor."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

MANIFEST = Path(__file__).with_name("embedding_models.json")
# The prompt names sentence-transformers models use for the documents side, most usual first.
DOCUMENT_PROMPTS = ("document", "passage", "corpus", "doc")


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the manifest knows of one model: prefixes, dimension and calibrated cosine floor."""

    model_id: str
    query_prefix: str = ""
    document_prefix: str = ""
    dim: int | None = None
    min_cosine: float | None = None  # None: not calibrated (recall goes lexical-only: missing_calibration)
    calibrated_on: str | None = None
    # The fused score evidence needs to be injected on its own (memory.recall.resolve_evidence_floor).
    evidence_min_score: float | None = None
    # Extra LiteLLM embedding parameters for queries and for documents (an `input_type`, a `task_type`):
    # how providers that embed the two sides differently are told which side a text is.
    query_params: Mapping[str, Any] = field(default_factory=dict)
    document_params: Mapping[str, Any] = field(default_factory=dict)
    # Where this came from: "manifest <id>", "model directory", or "" (nothing known).
    source: str = ""


def _entry(model_id: str, entry: Mapping[str, Any]) -> ModelInfo:
    min_cosine = entry.get("min_cosine")
    evidence = entry.get("evidence_min_score")
    return ModelInfo(
        model_id=model_id,
        query_prefix=str(entry.get("query_prefix", "")),
        document_prefix=str(entry.get("document_prefix", "")),
        dim=None if entry.get("dim") is None else int(entry["dim"]),
        min_cosine=None if min_cosine is None else float(min_cosine),
        calibrated_on=entry.get("calibrated_on"),
        evidence_min_score=None if evidence is None else float(evidence),
        query_params=dict(entry.get("query_params") or {}),
        document_params=dict(entry.get("document_params") or {}),
        source=f"manifest {model_id}",
    )


def load_manifest(path: Path = MANIFEST) -> dict[str, ModelInfo]:
    """The models the project knows, by model id (see embedding_models.json)."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {model_id: _entry(model_id, entry) for model_id, entry in raw.get("models", {}).items()}


def hub_id(path: Path) -> str | None:
    """`org/name` of a model directory inside a Hugging Face hub cache
    (…/models--org--name/snapshots/<revision>), else None."""
    parent = path.parent
    if parent.name != "snapshots" or not parent.parent.name.startswith("models--"):
        return None
    org, _, name = parent.parent.name.removeprefix("models--").partition("--")
    return f"{org}/{name}" if name else org


def match_entry(model_id: str, known: Mapping[str, ModelInfo], is_dir: bool) -> ModelInfo | None:
    """The manifest entry `model_id` stands for (see the module's doc), or None. Pure."""
    if model_id in known:
        return known[model_id]
    folded = {key.lower(): info for key, info in known.items()}
    if not is_dir:
        # provider/org/name: a server serving a model under its hub id
        _provider, sep, served = model_id.partition("/")
        return folded.get(served.lower()) if sep and "/" in served else None
    path = Path(model_id)
    hub = hub_id(path)
    if hub is not None:
        return folded.get(hub.lower())
    name = path.name.lower()
    ending = [info for key, info in folded.items() if key.rsplit("/", 1)[-1] == name]
    return ending[0] if len(ending) == 1 else None


def directory_prompts(path: Path) -> tuple[str, str]:
    """The query and document prompts a sentence-transformers directory declares, else ("", "")."""
    try:
        raw = json.loads((path / "config_sentence_transformers.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "", ""
    prompts = raw.get("prompts") if isinstance(raw, dict) else None
    if not isinstance(prompts, dict):
        return "", ""
    query = prompts.get("query")
    document = next((prompts[name] for name in DOCUMENT_PROMPTS if isinstance(prompts.get(name), str)), "")
    return (query if isinstance(query, str) else ""), document


# What a local model's vectors are stored under when its matrices run as int8 (memory.embed.onnx_bert.quantize):
# its own space, so that vectors of the two precisions are never compared with each other.
INT8_SUFFIX = "#int8"
PRECISIONS = ("int8", "fp32")


def base_model(model_id: str) -> str:
    """The model a vector space's id names: `model_id` without a precision suffix."""
    return model_id.removesuffix(INT8_SUFFIX)


@functools.lru_cache(maxsize=64)
def model_info(model_id: str) -> ModelInfo:
    """The manifest's entry for `model_id` (found as the module's doc says), or what its directory
    declares, or an empty one (no prefixes, not calibrated); read once per model id (recall asks
    every turn). A vector space with a precision suffix (`<model>#int8`) has its own entry when it
    was calibrated on its own (its floors differ by a grid step), else the model's."""
    own = load_manifest().get(model_id)
    if own is not None:
        return replace(own, model_id=model_id)
    base = base_model(model_id)
    is_dir = Path(base).is_dir()
    found = match_entry(base, load_manifest(), is_dir)
    if found is not None:
        return replace(found, model_id=model_id)
    if is_dir:
        query, document = directory_prompts(Path(base))
        if query or document:
            return ModelInfo(model_id, query_prefix=query, document_prefix=document, source="model directory")
    return ModelInfo(model_id)
