#!/usr/bin/env bash
# make fuzz: the stateful model (tests/test_model_protocol.py) under its long profile, round after
# round with a new seed each, for FUZZ_MINUTES (default 30); stops at the first failure, which
# Hypothesis keeps in .hypothesis/examples (the next run replays it first). Each round prints its
# seed and the command that replays it.
set -euo pipefail
minutes="${1:-30}"
examples="${FUZZ_EXAMPLES:-200}"
end=$(( $(date +%s) + minutes * 60 ))
round=0
while [ "$(date +%s)" -lt "$end" ]; do
  round=$((round + 1))
  seed="${FUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
  echo "fuzz round $round: seed $seed (replay: EFFECTGATE_MODEL_PROFILE=model-fuzz EFFECTGATE_MODEL_EXAMPLES=$examples .venv/bin/python -m pytest tests/test_model_protocol.py -p no:cacheprovider --timeout=0 --hypothesis-seed=$seed)"
  started=$(date +%s)
  EFFECTGATE_MODEL_PROFILE=model-fuzz EFFECTGATE_MODEL_EXAMPLES="$examples" \
    .venv/bin/python -m pytest -q tests/test_model_protocol.py -p no:cacheprovider --timeout=0 \
    --hypothesis-seed="$seed" --hypothesis-show-statistics
  echo "fuzz round $round: $examples examples per test in $(( $(date +%s) - started )) s"
  [ -z "${FUZZ_SEED:-}" ] || break
done
