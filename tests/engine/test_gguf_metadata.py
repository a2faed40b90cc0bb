"""Validation reads a GGUF's leading keys without parsing the whole header: the values equal
gguf.GGUFReader's for every key of the embedded default's file, in a fraction of its time."""
from __future__ import annotations

import time

import atom
from atom.config.gguf_metadata import read_metadata
from atom.config.model_facts import read_architecture_shape
from atom.loader.hf_config import model_source


def test_every_key_matches_ggufreader_and_the_shape_reads_fast():
    from gguf import GGUFReader

    cfg = atom.compose([])
    path = model_source(cfg)
    t0 = time.perf_counter()
    shape = read_architecture_shape(cfg)
    shape_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    reader = GGUFReader(str(path))
    reader_s = time.perf_counter() - t0
    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    meta = read_metadata(path, keys)
    assert sorted(meta) == sorted(keys)
    for key in keys:
        f, got = reader.fields[key], meta[key]
        if isinstance(got, list):  # the vocabulary and merges: their length and both ends
            n = len(f.data)
            ends = [*range(min(n, 50)), *range(max(50, n - 50), n)]
            assert len(got) == n and [got[i] for i in ends] == [f.contents(i) for i in ends], key
        else:
            assert got == f.contents(), key
    assert (shape.architecture, shape.num_attention_heads, shape.num_key_value_heads) == (
        "LlamaForCausalLM", 9, 3)
    assert shape_s < reader_s / 10, (shape_s, reader_s)
