"""GiNZA (ja_ginza) unlabeled attachment score on the gold Japanese PUD treebank.

Two figures: (1) GiNZA's own tokenization, words aligned to gold by character span (CoNLL 2018
style F1, `hf_syntax_mt.syntax.evaluation.attachment_scores`); (2) gold tokenization given to
GiNZA (tok2vec + parser run on a Doc built from the gold words).

    python benchmarks/ginza_pud_uas.py [--limit N] > benchmarks/results/ginza_pud_uas.json
"""

import argparse
import json
import time
from pathlib import Path

from hf_syntax_mt.syntax import SpacyAnnotator, annotation_from_spacy, read_conllu
from hf_syntax_mt.syntax.evaluation import attachment_scores

PUD = Path(__file__).resolve().parents[2] / "shared" / "data" / "ud_pud" / "ja_pud-ud-test.conllu"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--conllu", default=str(PUD))
    args = parser.parse_args()
    gold = read_conllu(Path(args.conllu))[: args.limit]

    annotator = SpacyAnnotator("ja_ginza")
    start = time.perf_counter()
    own = attachment_scores(gold, annotator.annotate([g.text for g in gold]))
    own["seconds"] = time.perf_counter() - start

    from spacy.tokens import Doc

    nlp = annotator._nlp
    start = time.perf_counter()
    predicted = []
    for g in gold:
        spaces = [g.spans[i + 1] is not None and g.spans[i] is not None and g.spans[i + 1][0] > g.spans[i][1]
                  for i in range(len(g.words) - 1)] + [False]
        doc = Doc(nlp.vocab, words=g.words, spaces=spaces)
        for name in ("tok2vec", "parser"):
            doc = nlp.get_pipe(name)(doc)
        predicted.append(annotation_from_spacy(doc))
    for g, p in zip(gold, predicted):
        p.text = g.text  # same words; spans were rebuilt from the gold words
    gold_tok = attachment_scores(gold, predicted)
    gold_tok["seconds"] = time.perf_counter() - start
    print(json.dumps({"sentences": len(gold), "ginza_tokenization": own, "gold_tokenization": gold_tok}, indent=2))


if __name__ == "__main__":
    main()
