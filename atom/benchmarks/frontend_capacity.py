"""Frontend capacity: how many tokens/s the serving layer alone can deliver, and at what ITL/TPOT.

The engine is replaced by the synthetic core (`server.engine_source=synthetic`): every stream gets
one token per engine step at a fixed rate, so whatever falls short of `streams x rate` — or turns
up as ITL above TPOT (the merge factor) — is the API process's cost: IPC, detokenization, dispatch,
SSE encoding and socket writes. Also times the per-frame cost of msgspec against `json.dumps`.

    python -m atom.benchmarks.frontend_capacity --streams 64 256 1024 --rate 20 --tokens 100 \
        --out benchmarks/results/frontend_capacity.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional
from atom.serving.common.sse import data_frame
from atom.serving.openai.protocol import CompletionChoice, CompletionResponse

REPO = Path(__file__).resolve().parents[2]


@dataclass
class StreamResult:
    ttft: float = 0.0
    latency: float = 0.0
    tokens: int = 0
    chunks: int = 0
    itl: list[float] = field(default_factory=list)
    error: Optional[str] = None

    @property
    def tpot(self) -> float:
        return (self.latency - self.ttft) / (self.tokens - 1) if self.tokens > 1 else 0.0


async def one_stream(session, url: str, prompt: str, tokens: int) -> StreamResult:
    import msgspec

    body = {"prompt": prompt, "max_tokens": tokens, "stream": True, "ignore_eos": True,
            "temperature": 0, "stream_options": {"include_usage": True}}
    r = StreamResult()
    t0 = time.perf_counter()
    last = None
    decode = msgspec.json.decode
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                r.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return r
            async for line in resp.content:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                now = time.perf_counter()
                chunk = decode(line[6:])
                if chunk.get("usage"):
                    r.tokens = chunk["usage"]["completion_tokens"]
                if not chunk.get("choices") or not chunk["choices"][0].get("text"):
                    continue
                if last is None:
                    r.ttft = now - t0
                else:
                    r.itl.append(now - last)
                last = now
                r.chunks += 1
        r.latency = time.perf_counter() - t0
    except Exception as exc:  # recorded, not raised: one failed stream must not hide the rest
        r.error = f"{type(exc).__name__}: {exc}"
    return r


async def run_level(base_url: str, streams: int, tokens: int) -> dict:
    import aiohttp

    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        url = base_url + "/v1/completions"
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one_stream(session, url, f"stream {i} says", tokens)
                                         for i in range(streams)))
        wall = time.perf_counter() - t0
    ok = [r for r in results if r.error is None]
    itl = [x for r in ok for x in r.itl]
    total = sum(r.tokens for r in ok)
    chunks = sum(r.chunks for r in ok)

    def ms(xs: list[float], q: Optional[float] = None) -> float:
        if not xs:
            return 0.0
        if q is None:
            return 1000 * statistics.fmean(xs)
        return 1000 * sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]

    tpots = [r.tpot for r in ok]
    mean_itl, mean_tpot = ms(itl), ms(tpots)
    return {"streams": streams, "ok": len(ok), "errors": sorted({r.error for r in results if r.error})[:3],
            "wall_s": round(wall, 3), "tokens": total, "chunks": chunks,
            "delivered_tok_s": round(total / wall, 1), "tokens_per_chunk": round(total / max(chunks, 1), 3),
            "ttft_ms_mean": round(ms([r.ttft for r in ok]), 2), "ttft_ms_p99": round(ms([r.ttft for r in ok], .99), 2),
            "itl_ms_mean": round(mean_itl, 2), "itl_ms_p50": round(ms(itl, .5), 2), "itl_ms_p99": round(ms(itl, .99), 2),
            "tpot_ms_mean": round(mean_tpot, 2), "tpot_ms_p99": round(ms(tpots, .99), 2),
            "itl_over_tpot": round(mean_itl / mean_tpot, 3) if mean_tpot else None}


def frame_cost(n: int = 200_000) -> dict:
    """Per-frame encode cost of one streaming chunk: the shared msgspec encoder vs json.dumps."""
    def via_msgspec() -> bytes:
        return data_frame(CompletionResponse("cmpl-0123456789abcdef", 1796000000, "model-name",
                                             [CompletionChoice(0, " token", None, None)]))

    def via_json() -> bytes:
        obj = {"id": "cmpl-0123456789abcdef", "created": 1796000000, "model": "model-name",
               "choices": [{"index": 0, "text": " token", "finish_reason": None, "logprobs": None}],
               "usage": None, "object": "text_completion"}
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    assert json.loads(via_msgspec()[6:]) == json.loads(via_json()[6:])
    out = {}
    for name, fn in (("msgspec", via_msgspec), ("json_dumps", via_json)):
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n // 5):
                fn()
            best = min(best, (time.perf_counter() - t) / (n // 5))
        out[f"{name}_us_per_frame"] = round(best * 1e6, 3)
    out["json_over_msgspec"] = round(out["json_dumps_us_per_frame"] / out["msgspec_us_per_frame"], 2)
    return out


def launch_server(port: int, rate: float, model_args: list[str], token_ids: str, log: Path) -> subprocess.Popen:
    """Token ids must decode to whole characters on their own (ordinary BPE words, not byte
    pieces): otherwise the detokenizer rightly holds them back and the run measures that."""
    lo, hi = (int(x) for x in token_ids.split("-"))
    cmd = [sys.executable, "-m", "atom.entrypoints.openai_server", "--host", "127.0.0.1",
           "--server-port", str(port), *model_args, "server=synthetic",
           f"server.synthetic_token_ids=[{','.join(str(i) for i in range(lo, hi + 1))}]",
           f"server.synthetic_tokens_per_s={rate}", "scheduler.max_num_seqs=4096",
           "kv_cache.num_blocks=1000000", "--no-enable-log-stats"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(cmd, cwd=str(REPO), env=env, stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def wait_healthy(base_url: str, proc: subprocess.Popen, timeout_s: float = 600) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited during startup")
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("server not healthy in time")


def machine() -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    return {"host": platform.node(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "commit": commit,
            "load_avg_at_start": os.getloadavg(), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--rate", type=float, default=20.0, help="tokens/s per stream (engine steps/s)")
    ap.add_argument("--tokens", type=int, default=100, help="tokens per stream")
    ap.add_argument("--model-args", default="", help="extra server args (default: the default model's "
                    "tokenizer, so detokenization is real BPE)")
    ap.add_argument("--token-ids", default="1000-1063", help="range the synthetic core cycles through")
    ap.add_argument("--base-url", default=None, help="use a running server instead of launching one")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    result = {"machine": machine(), "command": " ".join([os.path.basename(sys.executable), "-m",
                                                         "atom.benchmarks.frontend_capacity", *(argv or sys.argv[1:])]),
              "rate_tok_s_per_stream": args.rate, "tokens_per_stream": args.tokens,
              "frame_cost": frame_cost(), "levels": []}
    print(json.dumps(result["frame_cost"]))
    proc = None
    base_url = args.base_url
    if base_url is None:
        from socket import socket

        with socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        base_url = f"http://127.0.0.1:{port}"
        log = Path(os.environ.get("TMPDIR", "/tmp")) / f"frontend_capacity_{port}.log"
        proc = launch_server(port, args.rate, args.model_args.split(), args.token_ids, log)
    try:
        wait_healthy(base_url, proc) if proc else None
        asyncio.run(run_level(base_url, 8, 5))  # warm-up: connections, caches
        for n in args.streams:
            level = asyncio.run(run_level(base_url, n, args.tokens))
            level["ideal_tok_s"] = round(n * args.rate, 1)
            print(json.dumps(level))
            result["levels"].append(level)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
