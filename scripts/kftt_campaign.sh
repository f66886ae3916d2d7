#!/usr/bin/env bash
# The KFTT budget campaign (issue 73): its queue of runs, trained outside the work tree, one session after another.
#
#   bash scripts/kftt_campaign.sh start    # clone this checkout to $CAMPAIGN once, set it up, start or resume the
#                                          # queue in the background (2 processes, fp32), log under $RUNS; one
#                                          # queue at a time ($RUNS/campaign.lock, held from setup to the queue's end)
#   bash scripts/kftt_campaign.sh status   # the run now training: its step, learning rate, tune BLEU so far
#   bash scripts/kftt_campaign.sh stop     # SIGINT: the run saves a checkpoint, which the next `start` resumes from
#                                          # (a queue not yet training, still skipping or preparing, just ends)
#   bash scripts/kftt_campaign.sh collect  # copy the finished runs' results (JSON, translations; the training log
#                                          # from $RUNS) into this checkout's benchmarks/results (no file overwritten)
#
# The clone is made once and fast-forwarded to this checkout at each `start` (new recipe variants reach the queue;
# a run that resumes keeps its function, which the tests hold to the same losses, not its speed). quality.py run
# skips finished runs and parses only what a preset reads (transformer_abs reads no parse). Checkpoints and parse
# caches stay in $RUNS, which a later session on the same machine finds; a new machine starts the run again.
set -euo pipefail

SCRIPT=$(readlink -f "$0")
CAMPAIGN=${CAMPAIGN:-/work/campaign}
RUNS=${HF_SYNTAX_MT_RUNS:-/work/runs}
RECIPE=benchmarks/recipes/kftt.ja-en.budget.json
# "preset seed", in order: the queue of issue 106 (phase 3). Each run outlives a session (4B ~5.5 h, 8B ~11.5 h): it
# resumes from its checkpoints in $RUNS, which only a later session on the same machine finds.
QUEUE=("transformer_rel@4B 1" "transformer_dep_labeled_rel@keys@4B 1" "transformer_abs@8B 1"
       "transformer_dep_labeled_rel@8B 1" "transformer_abs@4B 2" "transformer_dep_labeled_rel@4B 2")
export CAMPAIGN HF_SYNTAX_MT_RUNS=$RUNS HF_HUB_OFFLINE=1

queue_pid() {  # the queue of this $CAMPAIGN: its bash runs there
    local pid
    for pid in $(pgrep -f "kftt_campaign.sh _queue" || true); do
        if [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$(readlink -f "$CAMPAIGN")" ]; then echo "$pid"; return; fi
    done
}

case "${1:-}" in
start)
    mkdir -p "$RUNS"
    exec 9>> "$RUNS/campaign.lock"   # the queue started below inherits it: the lock lasts as long as the queue
    if ! flock -n 9 || [ -n "$(queue_pid)" ]; then
        pid=$(queue_pid)
        echo "kftt_campaign: the queue of $CAMPAIGN is already running${pid:+ (pid $pid)} or starting"; exit 0
    fi
    here=$(dirname "$(dirname "$SCRIPT")")
    [ -d "$CAMPAIGN/.git" ] || git clone -q "$here" "$CAMPAIGN"
    cd "$CAMPAIGN"
    # a finished run writes its results into the clone; once collected and committed here they would block the
    # fast-forward as untracked files: drop those with the commit's bytes (any other file stays, and stops the merge)
    git ls-files --others --exclude-standard -- benchmarks/results | while read -r path; do
        if git -C "$here" cat-file -e "HEAD:$path" 2>/dev/null && git -C "$here" show "HEAD:$path" | cmp -s - "$path"
        then rm -- "$path"; fi
    done
    git pull -q --ff-only "$here" HEAD ||
        echo "kftt_campaign: could not fast-forward $CAMPAIGN (see above); the queue runs its $(git log --oneline -1)"
    [ -x .venv/bin/python ] || bash scripts/setup.sh
    log="$RUNS/campaign.$(date -u +%Y%m%dT%H%M%SZ).log"
    # job control on while it starts: a background job of a script otherwise starts with SIGINT ignored, and a `stop`
    # before the run trains (its handler catches SIGINT) would be lost
    set -m
    setsid nohup bash "$SCRIPT" _queue > "$log" 2>&1 < /dev/null &   # this file: the clone may predate it
    set +m
    echo "kftt_campaign: queue started from $CAMPAIGN at $(git log --oneline -1); log: $log"
    ;;
_queue)
    cd "$CAMPAIGN"
    # the recipe's benchmark-only parsers (the English target parser of transformer_dbsa), not in setup.sh's extras:
    # without them the queue stops at its first run that parses the target side
    parsers=$(.venv/bin/python -c "import json, sys; r = json.load(open(sys.argv[1]))
print(' '.join(p['pip'] for p in (r.get('source_parser'), r.get('target_parser')) if p and p.get('benchmark_only')))" "$RECIPE")
    [ -z "$parsers" ] || .venv/bin/python -m pip install -q $parsers -c scripts/constraints.txt
    for item in "${QUEUE[@]}"; do
        read -r preset seed <<< "$item"
        .venv/bin/python benchmarks/quality.py run --recipe "$RECIPE" --presets "$preset" --seeds "$seed" \
            --processes 2 --no-bf16 --runs-dir "$RUNS"
    done
    ;;
status)
    log=$(ls -t "$RUNS"/campaign.*.log 2>/dev/null | head -1 || true)
    [ -n "$log" ] || { echo "kftt_campaign: no campaign log under $RUNS"; exit 1; }
    echo "log: $log; queue: $([ -n "$(queue_pid)" ] && echo running || echo stopped)"
    grep -h "INFO quality: training" "$log" | tail -1 || true
    training_log=$(ls -t "$RUNS"/kftt.ja-en.budget/*/seed*/training_log.csv 2>/dev/null | head -1 || true)
    if [ -n "$training_log" ]; then
        echo "$training_log, written $(( $(date +%s) - $(stat -c %Y "$training_log") )) s ago:"
        head -1 "$training_log"; tail -1 "$training_log"
    fi
    grep -ho "'eval_bleu': '[0-9.]*'.*'epoch': '[0-9.]*'" "$log" | sed "s/'eval_chrf.*'epoch'/ epoch/" || true
    grep -h "interrupted at step\|Traceback\|Error" "$log" | tail -3 || true
    ;;
stop)
    pid=$(queue_pid)
    [ -n "$pid" ] || { echo "kftt_campaign: the queue is not running"; exit 0; }
    kill -INT -- "-$(ps -o pgid= -p "$pid" | tr -d ' ')"
    for _ in $(seq 120); do
        [ -z "$(queue_pid)" ] && break
        sleep 2
    done
    log=$(ls -t "$RUNS"/campaign.*.log | head -1)
    grep -h "interrupted at step" "$log" | tail -1 || echo "kftt_campaign: no 'interrupted at step' in $log: read it"
    [ -z "$(queue_pid)" ] || { echo "kftt_campaign: the queue still runs after 240 s"; exit 1; }
    ;;
collect)
    here=$(dirname "$(dirname "$SCRIPT")")
    for item in "${QUEUE[@]}"; do
        read -r preset seed <<< "$item"
        from="$CAMPAIGN/benchmarks/results/kftt.ja-en.budget/$preset" to="$here/benchmarks/results/kftt.ja-en.budget/$preset"
        if [ ! -f "$from/seed$seed.json" ]; then
            echo "kftt_campaign: $preset seed $seed has not finished (no $from/seed$seed.json)"; continue
        fi
        mkdir -p "$to" && cp -n "$from"/seed"$seed".* "$to"/
        log="$RUNS/kftt.ja-en.budget/$preset/seed$seed/training_log.csv"   # the rate ending at 0, the evaluations
        [ ! -f "$log" ] || cp -n "$log" "$to/seed$seed.training_log.csv"
        echo "kftt_campaign: $preset seed $seed -> $to: $(ls "$to" | grep -c "^seed$seed\.") files; then:"
        echo "  .venv/bin/python benchmarks/quality.py summary --recipe $RECIPE"
    done
    ;;
*)
    echo "usage: bash scripts/kftt_campaign.sh start|status|stop|collect" >&2; exit 2
    ;;
esac; exit   # on the line of esac: a queue that runs this file reads nothing after it, however it is edited
