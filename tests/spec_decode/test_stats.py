"""The statistics as the spec prints and serves them, from EngineStats counters."""
from __future__ import annotations

import logging

from atom.model_engine.messages import EngineStats
from atom.spec_decode.stats import (LOG_EVERY, SpecDecodeRecorder, mtp_statistics_text,
                                    mtp_stats_json)


def test_the_spec_example_block_and_the_endpoint_fields():
    s = EngineStats()
    rec = SpecDecodeRecorder(s, 5)
    for _ in range(850):
        rec.record(5, 5)
    for _ in range(150):
        rec.record(5, 0)
    text = mtp_statistics_text(s)
    assert text.startswith("MTP Statistics:\n  Total draft tokens: 5000\n"
                           "  Accepted tokens:    4250\n  Acceptance rate:    85.00%\n")
    body = mtp_stats_json(s, "ngram")
    assert body["total_draft_tokens"] == 5000 and body["total_accepted_tokens"] == 4250
    assert body["acceptance_rate"] == 0.85 and body["total_forwards"] == 1000
    assert body["average_tokens_per_forward"] == 1 + 4250 / 1000
    assert body["per_position_acceptance"] == [0.85] * 5


def test_per_position_counts_only_the_slots_proposed():
    s = EngineStats()
    rec = SpecDecodeRecorder(s, 3)
    rec.record(3, 1)
    rec.record(1, 1)
    assert s.spec_drafts_per_position == [2, 1, 1]
    assert s.spec_accepted_per_position == [2, 0, 0]
    assert mtp_stats_json(s, "ngram")["per_position_acceptance"] == [1.0, 0.0, 0.0]


def test_off_says_so():
    assert mtp_statistics_text(EngineStats()) == "MTP Statistics: speculative decoding is off"
    assert mtp_stats_json(EngineStats(), None)["enabled"] is False


def test_a_log_line_every_thousand_draft_tokens(caplog):
    s = EngineStats()
    rec = SpecDecodeRecorder(s, 7)
    with caplog.at_level(logging.INFO, logger="atom.engine"):
        for _ in range(3 * LOG_EVERY // 7 + 1):
            rec.record(7, 3)
    lines = [r.getMessage() for r in caplog.records if "spec decode" in r.getMessage()]
    assert len(lines) == 3
    assert lines[0].startswith("spec decode: 1001 draft tokens, 429 accepted")


def test_data_parallel_cores_add_slot_by_slot_and_share_k():
    parts = []
    for accepted in (3, 1):
        s = EngineStats(num_steps=2)
        SpecDecodeRecorder(s, 3).record(3, accepted)
        parts.append(s)
    total = EngineStats.total(parts)
    assert total.num_steps == 4 and total.spec_num_speculative_tokens == 3
    assert total.spec_draft_tokens == 6 and total.spec_accepted_tokens == 4
    assert total.spec_drafts_per_position == [2, 2, 2]
    assert total.spec_accepted_per_position == [2, 1, 1]
