#!/usr/bin/env bash
# The fifteenth session's second GPU batch: issue 21's proof 3 (reduced-depth R1, 3 dense + 2 MoE
# layers at real widths, quant=fp8_block kv_cache=fp8, through the server) at concurrency 1 / 64 /
# 256 with four prompts per concurrency slot (runs 79-81 used two, and their 64 / 256 figures
# spread 3,134-5,148 and 5,449-6,402 tok/s), twice in one command on the same tree.
#   carry [".whl"]
set -u
source benchmarks/device_steps.sh && install_wheels
export P3_CONCS=1,64,256 P3_PPC=4
proof3 a $PWD 280
proof3 b $PWD 280
