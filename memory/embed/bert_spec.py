"""What a sentence-transformers model directory holds, read from its JSON files without loading it:
whether the BERT runtimes (memory.embed.minilm on numpy, memory.embed.onnx_bert on onnxruntime) run it,
and its numbers (DESIGN §7). See memory.embed.minilm for what they run; anything else raises
UnsupportedModelError, so that the caller can use sentence-transformers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory.embed.errors import EmbeddingError

# Models of these types are BERT's layers (RoBERTa's differ in position numbering and vocabulary only).
MODEL_TYPES = ("bert", "xlm-roberta", "roberta")
_ST_SETTINGS = {"max_seq_length", "do_lower_case"}
# What sentence-transformers 5+ writes into sentence_bert_config.json for a plain text encoder.
_ST_DEFAULTS: dict[str, Any] = {
    "transformer_task": "feature-extraction",
    "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
    "module_output_name": "token_embeddings",
}
_UNSET = object()


class UnsupportedModelError(EmbeddingError):
    """The directory holds a model this runtime does not run (the caller may use sentence-transformers)."""


@dataclass(frozen=True, slots=True)
class BertSpec:
    """The numbers of a BERT sentence encoder, from its directory's JSON files."""

    layers: int
    hidden: int
    heads: int
    intermediate: int
    layer_norm_eps: float
    vocab_size: int
    max_positions: int
    max_seq_length: int
    normalize: bool
    transformer_dir: Path
    position_offset: int = 0  # the position-table row of a text's first token (RoBERTa: pad_token_id + 1)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnsupportedModelError(f"{path.parent}: no {path.name}") from None
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"{path}: unreadable ({exc})") from exc


def _read_object(path: Path) -> dict[str, Any]:
    data = _read_json(path)
    if not isinstance(data, dict):
        raise EmbeddingError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


# The pooling config's older form: one flag per mode (sentence-transformers reads no flag as "mean").
_POOLING_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def _pooling_modes(config: dict[str, Any]) -> list[str]:
    """The pooling modes a Pooling config asks for, in either of its forms."""
    mode = config.get("pooling_mode")
    if mode is None:
        return [name for flag, name in _POOLING_FLAGS.items() if config.get(flag)] or ["mean"]
    return [mode] if isinstance(mode, str) else [str(m) for m in mode]


def _module_kind(entry: Any) -> str:
    """'Transformer', 'Pooling', 'Normalize', … from a modules.json entry's dotted type."""
    kind = entry.get("type", "") if isinstance(entry, dict) else ""
    return str(kind).rsplit(".", 1)[-1]


def read_spec(path: Path) -> BertSpec:
    """The model's numbers; UnsupportedModelError for a directory this runtime does not run."""
    modules = _read_json(path / "modules.json")
    kinds = [_module_kind(m) for m in modules] if isinstance(modules, list) else []
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise UnsupportedModelError(f"{path}: modules {kinds or modules!r}, not Transformer, Pooling[, Normalize]")
    transformer_dir = path / str(modules[0].get("path", ""))
    pooling = _read_object(path / str(modules[1].get("path", "")) / "config.json")
    modes = _pooling_modes(pooling)
    if modes != ["mean"]:
        raise UnsupportedModelError(f"{path}: pooling {modes}, not mean pooling")

    config = _read_object(transformer_dir / "config.json")
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise UnsupportedModelError(f"{path}: model_type {model_type!r}, not one of {', '.join(MODEL_TYPES)}")
    if config.get("hidden_act") != "gelu":
        raise UnsupportedModelError(f"{path}: hidden_act {config.get('hidden_act')!r}, not the erf 'gelu'")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise UnsupportedModelError(f"{path}: position_embedding_type {config['position_embedding_type']!r}")
    try:
        hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        layers, intermediate = int(config["num_hidden_layers"]), int(config["intermediate_size"])
        vocab_size, max_positions = int(config["vocab_size"]), int(config["max_position_embeddings"])
        layer_norm_eps = float(config.get("layer_norm_eps", 1e-12))
    except (KeyError, TypeError, ValueError) as exc:
        raise EmbeddingError(f"{transformer_dir / 'config.json'}: missing or bad {exc}") from exc
    if heads < 1 or hidden % heads:
        raise EmbeddingError(f"{path}: hidden_size {hidden} is not a multiple of {heads} heads")
    pooling_dim = pooling.get("embedding_dimension", pooling.get("word_embedding_dimension", hidden))
    if int(pooling_dim) != hidden:
        raise EmbeddingError(f"{path}: pooling dimension {pooling_dim} != hidden_size {hidden}")

    st_config = _read_object(transformer_dir / "sentence_bert_config.json")
    # sentence-transformers 5+ saves processing settings here (lengths per task, chat templates…); a
    # setting at the value that means what this runtime does is fine, any other is refused.
    unknown = sorted(k for k, v in st_config.items() if k not in _ST_SETTINGS and _ST_DEFAULTS.get(k, _UNSET) != v)
    if unknown:
        raise UnsupportedModelError(f"{path}: sentence_bert_config.json has settings this runtime ignores: {unknown}")
    if st_config.get("do_lower_case"):
        raise UnsupportedModelError(f"{path}: do_lower_case is set (sentence-transformers lowercases the input)")
    offset = 0
    if model_type != "bert":
        try:
            offset = int(config["pad_token_id"]) + 1
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbeddingError(f"{transformer_dir / 'config.json'}: missing or bad {exc}") from exc
    max_seq_length = st_config.get("max_seq_length") or _tokenizer_max_length(transformer_dir) or max_positions
    return BertSpec(
        layers=layers,
        hidden=hidden,
        heads=heads,
        intermediate=intermediate,
        layer_norm_eps=layer_norm_eps,
        vocab_size=vocab_size,
        max_positions=max_positions,
        # sentence-transformers caps max_seq_length at the positions the model has
        max_seq_length=min(int(max_seq_length), max_positions - offset),
        normalize=len(kinds) == 3,
        transformer_dir=transformer_dir,
        position_offset=offset,
    )


def _tokenizer_max_length(transformer_dir: Path) -> int | None:
    """model_max_length of tokenizer_config.json, where sentence-transformers 5+ keeps max_seq_length;
    None when absent or transformers' "no limit" (a huge number)."""
    try:
        value = _read_object(transformer_dir / "tokenizer_config.json").get("model_max_length")
    except UnsupportedModelError:
        return None
    return int(value) if isinstance(value, int | float) and 0 < value < 1_000_000 else None


def weights_prefix(tensors: Mapping[str, Any]) -> str:
    """Where the encoder's weights are in a checkpoint: at the top, or under "bert." / "roberta."
    (saved from a task model)."""
    for prefix in ("", "bert.", "roberta."):
        if prefix + "embeddings.word_embeddings.weight" in tensors:
            return prefix
    return ""
