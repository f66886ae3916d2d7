"""Speed of the syntax feature map step with GiNZA, next to GiNZA's own ``nlp.pipe``.

On N Japanese sentences of small_parallel_enja/train.ja (with their English side as targets):
1. ``nlp.pipe`` alone (the parser's own speed, same pipeline and batch size; timed before and
   after step 2 and averaged, since the CPU may be shared);
2. the whole ``Dataset.map(add_syntax_features, batched=True)`` step (parse, tokenize, align,
   attach ``source_heads`` + ``source_distances``, write the Arrow cache), parser already loaded;
3. the same map again (served from the datasets cache, no parsing);
   and the map on already parsed annotations (the cost of feature attachment + Arrow writing);
4. the map with ``num_proc=2`` (each worker loads GiNZA itself; cold, includes that load);
and the same for a parse-only pipeline (NER, morphologizer, ... disabled).

    python benchmarks/annotation_speed.py [--n 5000] > benchmarks/results/annotation_speed.log
"""

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import datasets

from hf_syntax_mt.features.joint_bpe import train_joint_bpe_tokenizer
from hf_syntax_mt.features.syntax_features import add_syntax_features
from hf_syntax_mt.syntax import PreParsedAnnotator, SpacyAnnotator, annotation_from_spacy

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "small_parallel_enja"
PARSE_ONLY_DISABLE = ["ner", "morphologizer", "compound_splitter", "bunsetu_recognizer"]


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def measure(annotator, ja, en, tokenizer, workdir, n_proc_run=True):
    annotator.annotate(ja[:200])  # load and warm up the parser outside the timings
    nlp = annotator._nlp

    def pipe(annotations=None):
        """Seconds of nlp.pipe over all sentences (docs streamed, not kept); converting the docs
        to annotations, when asked, is timed separately and not included."""
        start, convert = time.perf_counter(), 0.0
        for doc in nlp.pipe(ja, batch_size=annotator.batch_size):
            if annotations is not None:
                c = time.perf_counter()
                annotations.append(annotation_from_spacy(doc))
                convert += time.perf_counter() - c
        return time.perf_counter() - start - convert, convert

    pipe_before, _ = pipe()

    raw = Path(workdir) / "raw"
    datasets.Dataset.from_dict({"source": ja, "target": en}).save_to_disk(str(raw))
    kwargs = dict(
        tokenizer=tokenizer,
        annotator=annotator,
        source_column="source",
        target_column="target",
        max_source_length=128,
        max_target_length=128,
        source_heads=True,
        source_distances=True,
    )

    def run(num_proc=None):
        ds = datasets.load_from_disk(str(raw))
        return ds.map(add_syntax_features, batched=True, batch_size=1000, fn_kwargs=kwargs, num_proc=num_proc,
                      remove_columns=["source", "target"])

    first, map_s = timed(run)
    annotations = []
    pipe_after, convert_s = pipe(annotations)
    pipe_s = (pipe_before + pipe_after) / 2  # nlp.pipe timed before and after the map (shared CPU)
    second, cached_s = timed(run)
    assert second.cache_files == first.cache_files
    # the map step without parsing (pre-parsed annotations): tokenize, align, features, Arrow write
    ds = datasets.load_from_disk(str(raw))
    _, features_s = timed(lambda: ds.map(add_syntax_features, batched=True, batch_size=1000,
                                         fn_kwargs=dict(kwargs, annotator=PreParsedAnnotator(annotations)),
                                         remove_columns=["source", "target"],
                                         cache_file_name=str(Path(workdir) / "features.arrow")))
    out = {
        "pipeline": nlp.pipe_names,
        "nlp_pipe_sentences_per_s": len(ja) / pipe_s,
        "annotation_from_spacy_ms_per_sentence": 1000 * convert_s / len(ja),
        "map_without_parsing_seconds": features_s,
        "map_without_parsing_fraction_of_nlp_pipe": features_s / pipe_s,
        "annotation_from_spacy_fraction_of_nlp_pipe": convert_s / pipe_s,
        "map_sentences_per_s": len(ja) / map_s,
        "map_overhead_vs_nlp_pipe": map_s / pipe_s - 1,
        "map_seconds": map_s,
        "nlp_pipe_seconds": pipe_s,
        "nlp_pipe_seconds_before_after": [pipe_before, pipe_after],
        "cached_second_run_seconds": cached_s,
    }
    if n_proc_run:
        kwargs["annotator"] = SpacyAnnotator(annotator.model, disable=annotator.disable, batch_size=annotator.batch_size)
        ds = datasets.load_from_disk(str(raw))
        _, proc_s = timed(lambda: ds.map(add_syntax_features, batched=True, batch_size=1000, fn_kwargs=kwargs,
                                         num_proc=2, remove_columns=["source", "target"],
                                         cache_file_name=str(Path(workdir) / "proc2.arrow")))
        out["map_num_proc_2_sentences_per_s_incl_model_load"] = len(ja) / proc_s
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "annotation_speed.json"))
    args = parser.parse_args()
    ja = (DATA / "train.ja").read_text(encoding="utf-8").splitlines()[: args.n]
    en = (DATA / "train.en").read_text(encoding="utf-8").splitlines()[: args.n]
    tokenizer = train_joint_bpe_tokenizer(ja + en, vocab_size=8000)
    results = {"sentences": len(ja), "load_average_at_start": os.getloadavg(), "cpus": os.cpu_count()}
    for name, disable in (("full_pipeline", []), ("parse_only", PARSE_ONLY_DISABLE)):
        with tempfile.TemporaryDirectory() as workdir:
            results[name] = measure(SpacyAnnotator("ja_ginza", disable=disable), ja, en, tokenizer, workdir)
        print(name, json.dumps(results[name], indent=2), flush=True)
    results["load_average_at_end"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
