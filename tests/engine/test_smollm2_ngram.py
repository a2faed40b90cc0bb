"""The n-gram proposer on the embedded SmolLM2 GGUF (real weights): greedy output with
speculation is the plain greedy output, and text that quotes itself gives real acceptance."""
from __future__ import annotations

import atom
from atom import SamplingParams

# A list the model continues by repeating its pattern: prompt lookup has something to find.
PROMPT = ("Repeat the list exactly.\nList: apple, banana, cherry, apple, banana, cherry, apple, "
          "banana, cherry\nList: apple, banana,")


def test_greedy_output_with_ngram_equals_plain_on_smollm2():
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    plain = atom.build_engine(atom.compose(["runtime=cpu", "load.progress_bar=false"]))
    want = plain.generate([PROMPT], params)[0]
    plain_steps = plain.stats().num_steps
    plain.shutdown()
    spec = atom.build_engine(atom.compose(["runtime=cpu", "load.progress_bar=false",
                                           "specdecode=ngram",
                                           "specdecode.num_speculative_tokens=4"]))
    got = spec.generate([PROMPT], params)[0]
    s = spec.stats()
    assert got["token_ids"] == want["token_ids"], (got["text"], want["text"])
    assert s.spec_accepted_tokens > 0 and s.num_steps < plain_steps
