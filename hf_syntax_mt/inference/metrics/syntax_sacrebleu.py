"""BLEU and chrF through sacrebleu, as a local `evaluate` metric module (loads by path, offline).

    bleu = BP · exp(Σ_{n=1..4} ¼ log p_n),  BP = min(1, exp(1 − ref_len / sys_len))
    chrF = (1 + β²) · chrP · chrR / (β² · chrP + chrR),  β = 2, character n-grams up to 6

Both are corpus-level and computed by `sacrebleu.corpus_bleu` / `sacrebleu.corpus_chrf`
(scores on a 0–100 scale). `tokenize` selects sacrebleu's BLEU tokenizer: `13a` (default),
`intl`, `char`, `none`, `zh`, `ja-mecab` (Japanese targets; needs `sacrebleu[ja]`), `ko-mecab`, ...
chrF works on characters and needs no tokenizer; `chrf_word_order=2` gives chrF++.
"""

import datasets
import evaluate
import sacrebleu

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of hypothesis strings.
    references: list of reference strings, or of lists of reference strings (the same number
        of references for every prediction).
    tokenize: sacrebleu BLEU tokenizer (`13a`, `intl`, `char`, `none`, `zh`, `ja-mecab`, ...).
    lowercase: lowercase before scoring BLEU.
    smooth_method, smooth_value, use_effective_order: passed to `sacrebleu.corpus_bleu`.
    force: sacrebleu's `force` (it changes no score): True by default here, so that 100 hypotheses ending
        in " ." (the corpora's own spacing, kept by detokenized output) do not print sacrebleu's
        three-line "you forgot to detokenize" warning at every evaluation.
    chrf_char_order, chrf_word_order, chrf_beta: passed to `sacrebleu.corpus_chrf`.
Returns:
    bleu, chrf, counts, totals, precisions, bp, sys_len, ref_len
Example:
    >>> metric = evaluate.load("path/to/syntax_sacrebleu.py")
    >>> metric.compute(predictions=["the cat sat ."], references=[["the cat sat ."]])["bleu"]
    100.00000000000004
"""


@evaluate.utils.file_utils.add_start_docstrings(__doc__, _KWARGS_DESCRIPTION)
class SyntaxSacrebleu(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=__doc__,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            homepage="https://github.com/mjpost/sacrebleu",
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Sequence(datasets.Value("string", id="sequence"), id="references"),
                    }
                ),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Value("string", id="sequence"),
                    }
                ),
            ],
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(
        self,
        predictions,
        references,
        tokenize="13a",
        lowercase=False,
        smooth_method="exp",
        smooth_value=None,
        force=True,
        use_effective_order=False,
        chrf_char_order=6,
        chrf_word_order=0,
        chrf_beta=2,
    ):
        if tokenize not in sacrebleu.BLEU.TOKENIZERS:
            raise ValueError(f"Unknown BLEU tokenize={tokenize!r}; choose one of {sorted(sacrebleu.BLEU.TOKENIZERS)}")
        references = [[ref] if isinstance(ref, str) else list(ref) for ref in references]
        n_refs = len(references[0]) if references else 0
        if any(len(refs) != n_refs for refs in references):
            raise ValueError("Every prediction needs the same number of references (sacrebleu's corpus format).")
        ref_streams = [[refs[i] for refs in references] for i in range(n_refs)]
        bleu = sacrebleu.corpus_bleu(
            predictions,
            ref_streams,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            force=force,
            lowercase=lowercase,
            tokenize=tokenize,
            use_effective_order=use_effective_order,
        )
        chrf = sacrebleu.corpus_chrf(
            predictions, ref_streams, char_order=chrf_char_order, word_order=chrf_word_order, beta=chrf_beta
        )
        return {
            "bleu": bleu.score,
            "chrf": chrf.score,
            "counts": bleu.counts,
            "totals": bleu.totals,
            "precisions": bleu.precisions,
            "bp": bleu.bp,
            "sys_len": bleu.sys_len,
            "ref_len": bleu.ref_len,
        }
