"""Speculative decoding: proposers that leave drafts on decoding sequences, the acceptance rule
a verify step applies, and the statistics of both."""
