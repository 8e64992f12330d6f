# Sourced by batch_check.sh and batch_profile.sh (ROOT set, cwd the repository root): HYBRID=1 selects the
# Qwen3.5-35B-A3B shape (check.sh's SYNTH_ARCH / MODEL_TAG / CONFIG and the Qwen3 vocabulary); MODEL_TAG
# defaults to the 8B llama files otherwise.
# shellcheck shell=bash
if [ -n "${HYBRID:-}" ]; then
  export SYNTH_ARCH=qwen3_5_moe MODEL_TAG=q35b CONFIG=${CONFIG:-$ROOT/tools/configs/qwen3.5-35b-a3b.json}
  export VOCAB=${VOCAB:-third_party/vocab/qwen3-tokenizer.json.xz}
fi
MODEL_TAG=${MODEL_TAG:-llama8b}
