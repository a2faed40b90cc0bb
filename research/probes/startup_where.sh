#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site:$PWD
cat > /tmp/s.py <<'PY'
import time,sys,logging;t=time.time()
logging.basicConfig(level=logging.INFO,format='%(relativeCreated)d ms %(name)s: %(message)s')
from atom.config.compose import compose
from atom.model_engine.llm_engine import LLMEngine
logging.getLogger('atom').info('imports done')
c=compose(['model=qwen3_0_6b','load=dummy','runtime.level=2']);c.load.progress_bar=False
e=LLMEngine.from_config(c);print('READY',time.time()-t,flush=True)
PY
python3 /tmp/s.py 2>&1 | grep -E "READY|ms atom" | cut -c1-120
python3 -X importtime /tmp/s.py 2> /tmp/imp.txt >/dev/null; sort -t'|' -k2 -n -r /tmp/imp.txt | head -45 | cut -c1-120
python3 -m cProfile -o /tmp/p.prof /tmp/s.py > /dev/null 2>&1
python3 - <<'PY'
import pstats
s=pstats.Stats('/tmp/p.prof'); s.sort_stats('cumulative')
s.print_callers('_register_to_dispatcher')
s.print_callers(r'\{built-in method builtins.compile\}')
s.print_callers('packages_distributions')
PY
python3 -c "import sys,os; import transformers, torch; print(transformers.__file__, torch.__file__); print(os.access(os.path.dirname(torch.__file__), os.W_OK)); import glob; print(len(glob.glob(os.path.dirname(transformers.__file__)+'/**/__pycache__', recursive=True)))"
env | grep -i pyth
