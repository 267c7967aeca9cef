#!/usr/bin/env python3
"""The local embedder's two runtimes, in the same run: numpy (memory.embed.minilm) and
sentence-transformers (torch), both on all-MiniLM-L6-v2 with one thread.

    .venv/bin/python benchmarks/embedder.py            # 1000 texts, 200 queries per runtime (~1 min)
    .venv/bin/python benchmarks/embedder.py --quick    # 200 texts, 50 queries
    .venv/bin/python benchmarks/embedder.py --json     # JSON instead of Markdown on stdout
    .venv/bin/python benchmarks/embedder.py --json out.json   # Markdown on stdout, JSON to a file

Each runtime runs in a fresh process through `LocalEmbedder(threads=1, runtime=...)`, the gateway's
own path: one worker thread, documents sorted by length and encoded in chunks of 16, queries one at
a time. Per runtime:
  * ready: seconds from the child's first line (before numpy is imported) to `load()` done;
  * docs/s: the documents' wall time, and per CPU-second of the process (all its threads): the CPU
    figure moves less when the machine is busy (the load average is reported);
  * query p50/p95: one short question at a time (LoCoMo's questions), after the documents;
  * RSS (VmRSS, MiB): python + numpy, after load, after the documents; and the peak (VmHWM).
Texts are LoCoMo dialog turns of 5-60 words as "Speaker: text" (../shared/bench/locomo10.json, read
here only), shuffled with seed 0; generated sentences when the file is missing. The two runtimes'
vectors are compared too (min cosine over all texts).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()  # a child's "ready" counts from here: numpy's and the runtime's imports included

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LOCOMO = ROOT.parent / "shared" / "bench" / "locomo10.json"
RUNTIMES = ("numpy", "sentence-transformers")


def rss_mib(field: str = "VmRSS") -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":")) / 1024


def corpus(n_texts: int, n_queries: int) -> tuple[list[str], list[str], str]:
    """Realistic chat messages and questions, and where they come from."""
    rng = random.Random(0)
    if LOCOMO.is_file():
        samples = json.loads(LOCOMO.read_text(encoding="utf-8"))
        turns = [
            f"{turn['speaker']}: {turn['text']}"
            for sample in samples
            for key, session in sample["conversation"].items()
            if key.startswith("session_") and isinstance(session, list)
            for turn in session
            if 5 <= len(turn["text"].split()) <= 60
        ]
        questions = [str(qa["question"]) for sample in samples for qa in sample["qa"] if qa.get("question")]
        rng.shuffle(turns)
        rng.shuffle(questions)
        if len(turns) >= n_texts and len(questions) >= n_queries:
            return turns[:n_texts], questions[:n_queries], "LoCoMo locomo10.json"
    words = "the a garden weather train Lyon tea dentist Friday sister puppy report meeting hiking jazz cat".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 60))) for _ in range(n_texts)]
    queries = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 10))) + "?" for _ in range(n_queries)]
    return texts, queries, "generated"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# --- child: one runtime ----------------------------------------------------------------------------


async def measure(runtime: str, texts: list[str], queries: list[str], vectors_path: str) -> dict[str, Any]:
    import numpy as np

    rss_base = rss_mib()
    from memory.embed.embeddings import LocalEmbedder

    embedder = LocalEmbedder(threads=1, runtime=runtime)
    await embedder.load()
    ready_s = time.perf_counter() - STARTED
    rss_loaded = rss_mib()
    await embedder.embed_documents(texts[:16])  # first-call costs out of the timing
    wall, cpu = time.perf_counter(), time.process_time()
    vectors = await embedder.embed_documents(texts)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rss_docs = rss_mib()
    latencies = []
    for query in queries:
        started = time.perf_counter()
        await embedder.embed_query(query)
        latencies.append((time.perf_counter() - started) * 1000)
    embedder.close()
    np.save(vectors_path, vectors)
    return {
        "runtime": embedder.runtime,
        "ready_s": ready_s,
        "docs_per_s": len(texts) / wall,
        "docs_per_cpu_s": len(texts) / cpu,
        "query_p50_ms": percentile(latencies, 50),
        "query_p95_ms": percentile(latencies, 95),
        "rss_base_mib": rss_base,
        "rss_loaded_mib": rss_loaded,
        "rss_after_docs_mib": rss_docs,
        "rss_peak_mib": rss_mib("VmHWM"),
    }


def child_main(runtime: str, data: str, vectors_path: str) -> None:
    payload = json.loads(Path(data).read_text(encoding="utf-8"))
    result = asyncio.run(measure(runtime, payload["texts"], payload["queries"], vectors_path))
    print(json.dumps(result))


# --- parent ----------------------------------------------------------------------------------------


def run(n_texts: int, n_queries: int) -> dict[str, Any]:
    import numpy as np

    texts, queries, source = corpus(n_texts, n_queries)
    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="clawgate-bench-") as tmp:
        data = Path(tmp) / "data.json"
        data.write_text(json.dumps({"texts": texts, "queries": queries}), encoding="utf-8")
        vectors = {}
        for runtime in RUNTIMES:
            vectors_path = str(Path(tmp) / f"{runtime}.npy")
            done = subprocess.run(
                [sys.executable, __file__, "--role", runtime, "--data", str(data), "--vectors", vectors_path],
                capture_output=True,
                text=True,
                timeout=1800,
                check=False,
                env=os.environ | {"PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")},
            )
            if done.returncode != 0:
                raise SystemExit(f"the {runtime} run failed:\n{done.stderr}")
            results[runtime] = json.loads(done.stdout.strip().splitlines()[-1])
            vectors[runtime] = np.load(vectors_path)
        min_cosine = float(np.min(np.sum(vectors["numpy"] * vectors["sentence-transformers"], axis=1)))
    words = [len(t.split()) for t in texts]
    return {
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg()[0],
            "threads": 1,
        },
        "texts": {
            "count": len(texts),
            "queries": len(queries),
            "source": source,
            "mean_words": sum(words) / len(words),
        },
        "results": results,
        "min_cosine_numpy_vs_torch": min_cosine,
    }


def markdown(res: dict[str, Any]) -> str:
    env, texts, results = res["environment"], res["texts"], res["results"]
    rows = [
        ("ready after start (s)", "ready_s", "{:.2f}"),
        ("documents / s", "docs_per_s", "{:.1f}"),
        ("documents / CPU-s", "docs_per_cpu_s", "{:.1f}"),
        ("query p50 (ms)", "query_p50_ms", "{:.1f}"),
        ("query p95 (ms)", "query_p95_ms", "{:.1f}"),
        ("RSS python + numpy (MiB)", "rss_base_mib", "{:.0f}"),
        ("RSS loaded (MiB)", "rss_loaded_mib", "{:.0f}"),
        ("RSS after documents (MiB)", "rss_after_docs_mib", "{:.0f}"),
        ("RSS peak (MiB)", "rss_peak_mib", "{:.0f}"),
    ]
    numpy_, torch_ = results["numpy"], results["sentence-transformers"]
    lines = [
        f"all-MiniLM-L6-v2, 1 thread: {texts['count']} texts ({texts['source']}, {texts['mean_words']:.0f} words "
        f"on average), {texts['queries']} queries; load average {env['load_average_before']:.1f} → "
        f"{env['load_average_after']:.1f} on {env['cpus']} CPUs",
        "",
        "| | numpy | sentence-transformers | numpy / s-t |",
        "|---|---:|---:|---:|",
    ]
    for label, key, fmt in rows:
        ratio = numpy_[key] / torch_[key] if torch_[key] else float("nan")
        lines.append(f"| {label} | {fmt.format(numpy_[key])} | {fmt.format(torch_[key])} | {ratio:.2f} |")
    lines += ["", f"min cosine between the two runtimes' vectors: {res['min_cosine_numpy_vs_torch']:.7f}"]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--texts", type=int, default=None, help="documents per runtime (default 1000, --quick 200)")
    p.add_argument("--queries", type=int, default=None, help="queries per runtime (default 200, --quick 50)")
    p.add_argument("--quick", action="store_true", help="a short run")
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help="JSON results: to stdout instead of Markdown, or to PATH (Markdown still printed)",
    )
    p.add_argument("--role", choices=RUNTIMES, help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--vectors", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role:
        child_main(args.role, args.data, args.vectors)
        return 0
    n_texts = args.texts or (200 if args.quick else 1000)
    n_queries = args.queries or (50 if args.quick else 200)
    if n_texts < 16 or n_queries < 1:
        p.error("--texts must be at least 16 and --queries at least 1")
    res = run(n_texts, n_queries)
    if args.json == "-":
        print(json.dumps(res, indent=2))
    else:
        print(markdown(res))
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
