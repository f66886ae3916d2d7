#!/usr/bin/env bash
# Quality runs (benchmarks/quality.py) on a lent GPU machine that has PyTorch but neither internet, the
# project's pinned packages, the parsers nor ../shared. Two steps:
#
#   here:   bash scripts/device_quality.sh prepare RECIPE.json...
#           fills .whl/site.tar.xz (the pinned packages the machine lacks, unpacked from their wheels) and
#           .devcarry/carry.tar.xz (`quality.py carry`: the recipes' corpus files, their parse caches with their records,
#           their tokenizers); both folders are git-ignored through .git/info/exclude.
#   there:  bash scripts/device_quality.sh run LANES START_BY STOP_AT FINAL_S RECIPE_NAME:PRESET...   (carry .whl, .devcarry)
#           trains the runs LANES at a time (seed 1, --device cuda, 1 CPU thread each, bf16 as the recipe says),
#           each in its own runs dir; starts none after START_BY seconds; each run ends its training at the last
#           epoch that ends FINAL_S seconds before STOP_AT (`quality.py run --stop-training-by`, recorded in its
#           result), leaving FINAL_S for its final translations; stops those still running at STOP_AT s; tars
#           benchmarks/results of the recipes and the logs into $OUT/quality_results.tgz. A run whose result
#           file is already in benchmarks/results is skipped. A stopped run is lost (its checkpoints stay there).
#           STOP_AFTER_EPOCH=N in the environment also ends every run's training after epoch N
#           (`--stop-training-after-epoch`), so that the presets of one call compare at equal training.
#
# Measured on an H200 (2026-11-26, 6,250-pair recipe, 80 epochs of 98 steps, a greedy dev evaluation each epoch):
# one run alone took 5.4 s an epoch (transformer_sla); six at once took 5.7 s an epoch for transformer_abs and
# ~10 s for transformer_dep_rel, so runs are bound by their own Python process, not by the GPU, and many lanes
# cost little (then with 2 CPU threads each; one thread each lets 12 lanes share the 16 cores). A transformer_dep_rel
# run (~800 s then, before _walk_to_roots stopped waiting for the GPU at every tree level) outlasts one 600-s call.
# Nine lanes at once are too many (H100, 2026-11-26, one thread each): per epoch 9.3 s (transformer_rel) to 10.8 s
# (transformer_dep_labeled_rel) on 6,250 pairs and 16 s (transformer_abs) to 19 s (dep_labeled_rel) on 12,500
# (196 updates an epoch), so no run of either recipe finished in 560 s and all nine were lost. A 6,250-pair run needs
# under ~6.5 s an epoch to fit a 600-s call (80 epochs, the final beam-4 dev and blind translations after): run
# five lanes or fewer, and put the transformer_dep_* runs in a call of their own kind or first.
# KFTT (kftt.ja-en.gpu, H200, 2026-11-28, `run 8 60 555 200`, eight presets at once): the machine took 5.7 of the
# session's 15 device minutes to start; with eight lanes an epoch (133 updates of 16k tokens, then greedy tune) took
# 26-44 s, so the runs stopped (--stop-training-by) after 4-12 of 12 epochs at ~355 s, and every beam-4 translation
# of dev, tune or the blind test took 36-53 s (corpus-order batches then; length-sorted since), so none of the eight
# reached its averaged model's last translation by 555 s and all were lost (the result is now written before the
# averaged model's translations). Next time: four lanes, FINAL_S 250.
#
# GPU checks (the package itself on the GPU; no corpus, no parser):
#   here:   bash scripts/device_quality.sh prepare          (no recipe: only .whl, with pytest)
#   there:  bash scripts/device_quality.sh checks           (carry .whl)
#           runs tests/model/test_cuda.py (fp32 on the GPU is the CPU's function, bf16, torch.compile, the Trainer
#           and the pipeline on the GPU) and benchmarks/gpu_speed.py, and puts the test log and
#           benchmarks/results/gpu_speed.json under $OUT.
#   there:  bash scripts/device_quality.sh relation-cost    (carry .whl)
#           the relation path of issues 91 and 107 on the GPU: tests/model/test_cuda.py (FlexAttention's training
#           step included), gpu_speed.py for abs, rel, dep_labeled_rel, dep_labeled_rel@keys and the key-only variants
#           in FlexAttention with the ids made with the batch (rel@keys@flex, dep_labeled_rel@keys@flex) at 4,096 and
#           32,768 tokens (fp32 and bf16), and their profiles, eager and compiled; the JSONs and logs under $OUT (`gpu_speed.py --tables-from` writes RESULTS' tables).
set -u
cd "$(dirname "$0")/.."

prepare() {
    local py=.venv/bin/python
    mkdir -p .git/info; grep -qx '/.whl/' .git/info/exclude 2>/dev/null || printf '/.whl/\n/.devcarry/\n' >> .git/info/exclude
    rm -rf .whl .devcarry && mkdir -p .whl .devcarry
    local wheels=() tmp; tmp=$(mktemp -d)
    for name in transformers huggingface_hub datasets evaluate dill multiprocess httpx2 httpcore2 truststore tokenizers fsspec click regex \
            pytest pluggy iniconfig pygments pytest-xdist execnet; do  # xdist: pyproject's addopts name its -n
        wheels+=("$(grep -i "^${name}==" scripts/constraints.txt)")
    done
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$tmp/wheels" "${wheels[@]}" || exit 1
    # the wheels unpacked and xz-compressed together: 9 MB instead of 20 (the travelling tree's limit is 64 MiB)
    mkdir -p "$tmp/site" && for wheel in "$tmp"/wheels/*.whl; do unzip -q -o "$wheel" -d "$tmp/site" || exit 1; done
    tar cJf .whl/site.tar.xz -C "$tmp/site" . || exit 1
    [ $# -gt 0 ] || { rm -rf "$tmp"; du -sh .whl; return; }  # no recipe: the packages only (for `checks`)
    HF_SYNTAX_MT_RUNS=${HF_SYNTAX_MT_RUNS:-runs/quality} $py benchmarks/quality.py carry \
        $(printf -- '--recipe %s ' "$@") --to "$tmp/carry" || exit 1
    # gzipped files travel unzipped inside one .tar.xz (<name>.gz -> <name>.gz.raw; `run` gzips them back)
    find "$tmp/carry" -name '*.gz' -exec sh -c 'gunzip -c "$1" > "$1.raw" && rm "$1"' _ {} \; || exit 1
    tar cJf .devcarry/carry.tar.xz -C "$tmp/carry" . || exit 1
    rm -rf "$tmp"
    du -sh .whl .devcarry
}

run() {
    local lanes=$1 start_by=$2 stop_at=$3 final_s=$4; shift 4
    local start; start=$(date +%s)
    [ -f .devcarry/carry.tar.xz ] && [ -f .whl/site.tar.xz ] || { echo "no .devcarry/carry.tar.xz or .whl/site.tar.xz: run prepare (again) and carry .whl and .devcarry" >&2; exit 1; }
    local carry=/tmp/carry
    mkdir -p /tmp/site "$carry" && tar xJf .whl/site.tar.xz -C /tmp/site && tar xJf .devcarry/carry.tar.xz -C "$carry" || exit 1
    find "$carry" -name '*.gz.raw' | xargs -P 16 -I{} sh -c 'gzip -1 -c "$1" > "${1%.raw}" && rm "$1"' _ {} || exit 1
    export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
    mkdir -p ../shared/data && cp -r "$carry"/data/* ../shared/data/ || exit 1
    for packed in ../shared/data/*/*.carry.gz; do [ -e "$packed" ] && gunzip -c "$packed" > "${packed%.carry.gz}" && rm "$packed"; done
    echo "unpacked at $(( $(date +%s) - start )) s"
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    mkdir -p /tmp/logs
    RECIPES=()  # global: the EXIT trap runs after this function has returned
    trap 'tar czf "$OUT/quality_results.tgz" /tmp/logs $(printf "benchmarks/results/%s " "${RECIPES[@]}") 2>/dev/null' EXIT
    for run in "$@"; do
        local recipe=${run%%:*} preset=${run#*:}
        [[ " ${RECIPES[*]} " == *" $recipe "* ]] || RECIPES+=("$recipe")
        if [ -f "benchmarks/results/$recipe/$preset/seed1.json" ]; then echo "$run: done before, skipped"; continue; fi
        while [ "$(jobs -rp | wc -l)" -ge "$lanes" ] && [ $(( $(date +%s) - start )) -lt "$stop_at" ]; do sleep 5; done
        if [ $(( $(date +%s) - start )) -ge "$start_by" ]; then echo "$run: not started (past $start_by s)"; continue; fi
        local dir=/tmp/runs/$recipe.$preset
        mkdir -p "$dir/$recipe" && cp -r "$carry"/parse_cache "$dir"/ && cp -r "$carry"/tokenizers/"$recipe"/* "$dir/$recipe"/
        HF_SYNTAX_MT_RUNS=$dir python3 benchmarks/quality.py run --recipe "benchmarks/recipes/$recipe.json" \
            --presets "$preset" --seeds 1 --device cuda --threads 1 --stop-training-by $(( start + stop_at - final_s )) \
            ${STOP_AFTER_EPOCH:+--stop-training-after-epoch "$STOP_AFTER_EPOCH"} \
            > "/tmp/logs/$recipe.$preset.log" 2>&1 &
        echo "$run: started at $(( $(date +%s) - start )) s"
    done
    local last_report=0
    while [ -n "$(jobs -rp)" ] && [ $(( $(date +%s) - start )) -lt "$stop_at" ]; do
        sleep 5
        if [ $(( $(date +%s) - last_report )) -ge 60 ]; then  # evaluations so far, to size the next lease
            last_report=$(date +%s)
            echo "at $(( last_report - start )) s: $(for log in /tmp/logs/*.log; do printf '%s %s, ' "$(basename "$log" .log)" "$(grep -c "'eval_bleu'" "$log")"; done)"
        fi
    done
    [ -z "$(jobs -rp)" ] || { echo "stopping the runs still going at $stop_at s"; kill $(jobs -rp); sleep 2; }
    for log in /tmp/logs/*.log; do echo "$(basename "$log"): $(grep -c "'eval_bleu'" "$log") evals; $(grep -o 'wrote .*' "$log")"; done
    echo "all done at $(( $(date +%s) - start )) s"
}

checks() {
    [ -f .whl/site.tar.xz ] || { echo "no .whl/site.tar.xz: run prepare (again) and carry .whl" >&2; exit 1; }
    mkdir -p /tmp/site && tar xJf .whl/site.tar.xz -C /tmp/site || exit 1
    export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
    python3 -m pytest -q -n 0 -p no:cacheprovider tests/model/test_cuda.py 2>&1 | tee "$OUT/test_cuda.log" | tail -40
    (cd benchmarks && python3 gpu_speed.py --output "$OUT/gpu_speed.json") 2>&1 | tee "$OUT/gpu_speed.log" | tail -60
}

relation_cost() {  # issues 91 and 107: the relation path on the GPU (after `prepare`, carry .whl); ~9 min on an H200
    # @keys@flex: the key-only variant in FlexAttention with the relation ids made with the batch (issue 107, item 3)
    [ -f .whl/site.tar.xz ] || { echo "no .whl/site.tar.xz: run prepare (again) and carry .whl" >&2; exit 1; }
    mkdir -p /tmp/site && tar xJf .whl/site.tar.xz -C /tmp/site || exit 1
    export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
    local presets=(transformer_abs transformer_rel transformer_dep_labeled_rel transformer_dep_labeled_rel@keys
                   transformer_rel@keys@flex transformer_dep_labeled_rel@keys@flex)
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
    timeout 200 python3 -m pytest -q -x -n 0 -p no:cacheprovider tests/model/test_cuda.py 2>&1 | tee "$OUT/test_cuda.log" | tail -5
    cd benchmarks
    for tokens in 4096 32768; do
        timeout 150 python3 gpu_speed.py --presets "${presets[@]}" --lengths 32 64 128 --rounds 6 \
            --tokens-per-batch "$tokens" --output "$OUT/gpu_speed_relation_${tokens}.json" 2>&1 | tail -30
    done
    timeout 120 python3 gpu_speed.py --lengths 64 --profile "${presets[@]}" --compile 2>&1 | tee "$OUT/gpu_profile.log" | tail -60
}

case "${1:-}" in
    prepare) shift; prepare "$@" ;;
    run) shift; run "$@" ;;
    checks) checks ;;
    relation-cost) relation_cost ;;
    *) echo "usage: $0 prepare [RECIPE.json...] | run LANES START_BY STOP_AT FINAL_S RECIPE_NAME:PRESET... | checks | relation-cost" >&2
       exit 2 ;;
esac
