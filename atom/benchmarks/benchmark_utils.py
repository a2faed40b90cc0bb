"""Result files: the part of a benchmark that writes to the filesystem.

`convert_to_pytorch_benchmark_format` emits the record layout of PyTorch's OSS benchmark
database (one record per metric), so atom's numbers can sit beside other engines' in one
dashboard.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Optional


def _jsonable(value: Any) -> Any:
    """inf/nan are not JSON; `--request-rate inf` must still round-trip, as the string "inf"."""
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def write_to_json(filename: str | Path, records: Any) -> None:
    path = Path(filename)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(records), indent=2, allow_nan=False), encoding="utf-8")


_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _restore(value: Any) -> Any:
    return _NON_FINITE.get(value, value) if isinstance(value, str) else value


def read_result_json(filename: str | Path) -> dict[str, Any]:
    """Inverse of `write_to_json` for a result: top-level and `args` scalars written as "inf"
    come back as floats, so a loaded result equals the one that was saved."""
    data = json.loads(Path(filename).read_text(encoding="utf-8"))
    for section in (data, data.get("args") or {}):
        for key, value in section.items():
            section[key] = _restore(value)
    return data


def convert_to_pytorch_benchmark_format(
    args: argparse.Namespace | dict[str, Any], metrics: dict[str, list[float]],
    extra_info: dict[str, Any],
) -> list[dict[str, Any]]:
    """One record per metric: {benchmark: {name, extra_info: {args}}, model: {name},
    metric: {name, benchmark_values, extra_info}}."""
    arg_dict = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
    records = []
    for name, values in metrics.items():
        records.append({
            "benchmark": {"name": "atom benchmark", "extra_info": {"args": _jsonable(arg_dict)}},
            "model": {"name": arg_dict.get("model")},
            "metric": {"name": name, "benchmark_values": _jsonable(list(values)),
                       "extra_info": _jsonable(extra_info)},
        })
    return records


def pytorch_format_path(result_path: str | Path) -> Path:
    path = Path(result_path)
    return path.with_name(path.stem + ".pytorch.json")


def default_result_filename(backend: str, request_rate: float, max_concurrency: Optional[int],
                            model: str, date: str) -> str:
    model_id = model.rstrip("/").split("/")[-1]
    rate = "inf" if math.isinf(request_rate) else f"{request_rate:g}"
    conc = f"-concurrency{max_concurrency}" if max_concurrency is not None else ""
    return f"{backend}-{rate}qps{conc}-{model_id}-{date}.json"
