"""A synthetic translation task whose target is a deterministic function of the source syntax.

Source sentences come from a small English-like grammar (determiners, adjectives, nouns,
transitive/intransitive verbs, adverbs, prepositional phrases, subject and object relative
clauses, NP and VP coordination) together with their GOLD dependency tree (UD-style
relations) and GOLD constituency tree (Penn-style brackets under a `ROOT` node).

The target is the head-final ("English→Japanese-like") linearisation of the dependency tree,
word by word mapped into an invented vocabulary (`TARGET_WORDS`):

    lin(h) = [ lin(d) + particle(d)  for d in pre(h) ]  +  [ T(h) ]  +  [ lin(d) for d in post(h) ]

- `pre(h)`: the dependents of h whose relation is not in `POSTPOSED`, in source order;
- `post(h)`: the dependents with relation `case` or `punct`, in source order (prepositions become
  postpositions, the final full stop stays last);
- `particle(d)`: a case particle after a subject (`ga`) or an object (`o`), see `PARTICLES`;
- `T(w)`: the word-for-word translation `TARGET_WORDS[w]`.

The target tree is the source tree carried over (the translation of w depends on the
translation of w's head); a particle depends on the word it marks (as GiNZA attaches を to
its noun). `target_from_tree` implements exactly this and is the documented definition
of the task. Everything here is pure Python (no torch).

Conventions: word-level heads are 0-based and the root points to itself; CoNLL-U files
use 1-based heads with 0 for the root.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from ..syntax.grammar import (
    ADJECTIVES,
    ADVERBS,
    CONJUNCTIONS,
    DEPTH_DECAY,
    DETERMINERS,
    FULL_STOP,
    INTRANSITIVE_VERBS,
    MAX_ADJECTIVES,
    NOUN_CONJUNCTIONS,
    NOUNS,
    P_ADJECTIVE,
    P_ADVERB,
    P_NOUN_COORDINATION,
    P_NOUN_PP,
    P_RELATIVE,
    P_SUBJECT_RELATIVE,
    P_TRANSITIVE,
    P_VERB_COORDINATION,
    P_VERB_PP,
    PREPOSITIONS,
    RELATIVIZER,
    TRANSITIVE_VERBS,
)

UPOS = {"DT": "DET", "JJ": "ADJ", "NN": "NOUN", "VBD": "VERB", "RB": "ADV", "IN": "ADP",
        "CC": "CCONJ", "WDT": "PRON", ".": "PUNCT"}
POSTPOSED = ("case", "punct")
PARTICLES = {"nsubj": "ga", "obj": "o"}


def _invented_vocabulary() -> dict[str, str]:
    """Map every source word to a unique two-syllable invented word (a fixed bijection)."""
    syllables = [c + v for c in "kstnhmryw" for v in "aeiou"]  # 45 syllables
    n = len(syllables) ** 2  # 2025 two-syllable words, 37 is coprime with it
    source = (DETERMINERS + ADJECTIVES + NOUNS + TRANSITIVE_VERBS + INTRANSITIVE_VERBS
              + ADVERBS + PREPOSITIONS + CONJUNCTIONS + [RELATIVIZER])
    if len(set(source)) != len(source):
        raise ValueError("the synthetic lexicon contains a duplicate word")
    vocab = {}
    for i, word in enumerate(source):
        j = (37 * i + 11) % n
        vocab[word] = syllables[j // len(syllables)] + syllables[j % len(syllables)]
    vocab[FULL_STOP] = FULL_STOP
    return vocab


TARGET_WORDS = _invented_vocabulary()


@dataclass
class SyntheticExample:
    """One sentence pair with gold trees (0-based heads, root -> itself)."""

    source: str  # words joined by single spaces
    target: str  # target tokens joined by single spaces
    source_heads: list[int]
    source_deprels: list[str]
    source_xpos: list[str]  # Penn tags (UPOS via `UPOS`)
    source_tree: str  # bracketed constituency tree whose leaves are the source words
    target_heads: list[int]
    target_deprels: list[str]
    alignment: list[int]  # source index of each target token, -1 for particles


def target_from_tree(words: list[str], heads: list[int], deprels: list[str]):
    """Head-final linearisation of a dependency tree (see the module docstring).

    Returns `(tokens, heads, deprels, alignment)` of the target sentence; `heads` are 0-based
    with the root pointing to itself, `alignment[t]` is the source index translated by
    token t (-1 for a particle).
    """
    n = len(words)
    if not (len(heads) == len(deprels) == n) or n == 0:
        raise ValueError("words, heads and deprels must be non-empty and of equal length")
    if any(not 0 <= h < n for h in heads):
        raise ValueError(f"heads must lie in [0, {n}), got {heads}")
    roots = [i for i in range(n) if heads[i] == i]
    if len(roots) != 1:
        raise ValueError(f"expected exactly one self-looped root, got {len(roots)}")
    dependents = [[] for _ in range(n)]
    for i, h in enumerate(heads):
        if h != i:
            dependents[h].append(i)

    order = []  # (source index, particle or None)

    def lin(h):
        for d in dependents[h]:
            if deprels[d] not in POSTPOSED:
                lin(d)
                if deprels[d] in PARTICLES:
                    order.append((d, PARTICLES[deprels[d]]))
        order.append((h, None))
        for d in dependents[h]:
            if deprels[d] in POSTPOSED:
                lin(d)

    lin(roots[0])
    if len(order) - sum(p is not None for _, p in order) != n:  # a cycle is unreachable from the root
        raise ValueError("the dependency tree is not connected (it has a cycle)")
    position = {i: t for t, (i, p) in enumerate(order) if p is None}
    tokens, t_heads, t_deprels, alignment = [], [], [], []
    for i, particle in order:
        if particle is None:
            tokens.append(TARGET_WORDS.get(words[i], words[i]))
            t_heads.append(position[heads[i]])
            t_deprels.append(deprels[i])
            alignment.append(i)
        else:
            tokens.append(particle)
            t_heads.append(position[i])
            t_deprels.append("case")
            alignment.append(-1)
    return tokens, t_heads, t_deprels, alignment


class _Word:
    def __init__(self, form: str, xpos: str):
        self.form, self.xpos, self.head, self.deprel = form, xpos, None, "root"

    def attach(self, head: "_Word", deprel: str) -> None:
        self.head, self.deprel = head, deprel


class _Grammar:
    """Random generator. A phrase is `(tree, head word)`; a tree is `(label, children)` and a
    leaf is `(xpos, _Word)`. Recursion probabilities shrink with the embedding depth."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def _p(self, p: float, depth: int) -> bool:
        return self.rng.random() < p * DEPTH_DECAY ** depth

    def _leaf(self, words: list[str], xpos: str):
        word = _Word(self.rng.choice(words), xpos)
        return (xpos, word), word

    def noun_phrase(self, depth: int, coordinate: bool = True):
        det, det_w = self._leaf(DETERMINERS, "DT")
        n_adj = 0
        while n_adj < MAX_ADJECTIVES and self.rng.random() < P_ADJECTIVE:
            n_adj += 1
        adjs = [self._leaf(ADJECTIVES, "JJ") for _ in range(n_adj)]
        noun, head = self._leaf(NOUNS, "NN")
        det_w.attach(head, "det")
        for _, adj_w in adjs:
            adj_w.attach(head, "amod")
        tree = ("NP", [det, *[a for a, _ in adjs], noun])
        if self._p(P_NOUN_PP, depth):
            pp, pp_head = self.prepositional_phrase(depth + 1)
            pp_head.attach(head, "nmod")
            tree = ("NP", [tree, pp])
        if self._p(P_RELATIVE, depth):
            rel, rel_head = self.relative_clause(depth + 1)
            rel_head.attach(head, "acl:relcl")
            tree = ("NP", [tree, rel])
        if coordinate and self._p(P_NOUN_COORDINATION, depth):
            cc, cc_w = self._leaf(NOUN_CONJUNCTIONS, "CC")
            other, other_head = self.noun_phrase(depth + 1, coordinate=False)
            cc_w.attach(other_head, "cc")
            other_head.attach(head, "conj")
            tree = ("NP", [tree, cc, other])
        return tree, head

    def prepositional_phrase(self, depth: int):
        prep, prep_w = self._leaf(PREPOSITIONS, "IN")
        np, head = self.noun_phrase(depth)
        prep_w.attach(head, "case")
        return ("PP", [prep, np]), head

    def verb_phrase(self, depth: int, gap: bool = False):
        """A VP; with `gap` its object is missing (extracted by an object relative clause)."""
        transitive = gap or self.rng.random() < P_TRANSITIVE
        verb, head = self._leaf(TRANSITIVE_VERBS if transitive else INTRANSITIVE_VERBS, "VBD")
        children = [verb]
        if transitive and not gap:
            obj, obj_head = self.noun_phrase(depth + 1)
            obj_head.attach(head, "obj")
            children.append(obj)
        if self._p(P_VERB_PP, depth):
            pp, pp_head = self.prepositional_phrase(depth + 1)
            pp_head.attach(head, "obl")
            children.append(pp)
        if self.rng.random() < P_ADVERB:
            adv, adv_w = self._leaf(ADVERBS, "RB")
            adv_w.attach(head, "advmod")
            children.append(("ADVP", [adv]))
        return ("VP", children), head

    def relative_clause(self, depth: int):
        that, that_w = self._leaf([RELATIVIZER], "WDT")
        if self.rng.random() < P_SUBJECT_RELATIVE:  # subject relative: "that chased the dog"
            vp, head = self.verb_phrase(depth)
            that_w.attach(head, "nsubj")
            clause = ("S", [vp])
        else:  # object relative: "that the dog chased"
            subj, subj_head = self.noun_phrase(depth, coordinate=False)
            vp, head = self.verb_phrase(depth, gap=True)
            that_w.attach(head, "obj")
            subj_head.attach(head, "nsubj")
            clause = ("S", [subj, vp])
        return ("SBAR", [("WHNP", [that]), clause]), head

    def sentence(self):
        subj, subj_head = self.noun_phrase(0)
        vp, head = self.verb_phrase(0)
        subj_head.attach(head, "nsubj")
        if self.rng.random() < P_VERB_COORDINATION:
            cc, cc_w = self._leaf(CONJUNCTIONS, "CC")
            other, other_head = self.verb_phrase(1)
            cc_w.attach(other_head, "cc")
            other_head.attach(head, "conj")
            vp = ("VP", [vp, cc, other])
        stop, stop_w = self._leaf([FULL_STOP], ".")
        stop_w.attach(head, "punct")
        return ("ROOT", [("S", [subj, vp, stop])])


def _leaves(tree) -> list[_Word]:
    label, children = tree
    if isinstance(children, _Word):
        return [children]
    return [w for child in children for w in _leaves(child)]


def _bracket(tree) -> str:
    label, children = tree
    if isinstance(children, _Word):
        return f"({label} {children.form})"
    return f"({label} " + " ".join(_bracket(c) for c in children) + ")"


def _example(tree) -> SyntheticExample:
    words = _leaves(tree)
    index = {id(w): i for i, w in enumerate(words)}
    heads = [i if w.head is None else index[id(w.head)] for i, w in enumerate(words)]
    forms = [w.form for w in words]
    deprels = [w.deprel for w in words]
    tokens, t_heads, t_deprels, alignment = target_from_tree(forms, heads, deprels)
    return SyntheticExample(
        source=" ".join(forms), target=" ".join(tokens), source_heads=heads,
        source_deprels=deprels, source_xpos=[w.xpos for w in words], source_tree=_bracket(tree),
        target_heads=t_heads, target_deprels=t_deprels, alignment=alignment,
    )


def generate_synthetic_corpus(n: int, seed: int = 0, max_words: int = 25) -> list[SyntheticExample]:
    """`n` distinct sentence pairs (deterministic for a seed) of at most `max_words` source words
    (the full stop included; the shortest sentences have 4 words)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if max_words < 4:
        raise ValueError(f"max_words must be >= 4 (the shortest sentence has 4 words), got {max_words}")
    grammar = _Grammar(random.Random(seed))
    examples, seen = [], set()
    while len(examples) < n:
        tree = grammar.sentence()
        words = _leaves(tree)
        key = " ".join(w.form for w in words)
        if len(words) > max_words or key in seen:
            continue
        seen.add(key)
        examples.append(_example(tree))
    return examples


def random_dependency_tree(length: int, rng: random.Random) -> list[int]:
    """Heads of a random tree over `length` words (0-based, the root points to itself): the words,
    in a random order, each attach to a word placed before them (a random recursive tree)."""
    order = list(range(length))
    rng.shuffle(order)
    heads = [0] * length
    heads[order[0]] = order[0]
    for position, token in enumerate(order[1:], start=1):
        heads[token] = order[rng.randrange(position)]
    return heads


def conllu_block(words: list[str], heads: list[int], deprels: list[str], upos=None, xpos=None,
                 sent_id: str | None = None) -> str:
    """One CoNLL-U sentence (10 columns, 1-based heads, 0 = root), ending with a blank line."""
    n = len(words)
    upos = upos or ["_"] * n
    xpos = xpos or ["_"] * n
    lines = [f"# sent_id = {sent_id}"] if sent_id is not None else []
    lines.append(f"# text = {' '.join(words)}")
    for i in range(n):
        head = 0 if heads[i] == i else heads[i] + 1
        lines.append("\t".join([str(i + 1), words[i], words[i], upos[i], xpos[i], "_",
                                str(head), deprels[i], "_", "_"]))
    return "\n".join(lines) + "\n\n"


def write_synthetic_corpus(out_dir, n_train: int = 20000, n_dev: int = 500, n_test: int = 500,
                           seed: int = 0, max_words: int = 25) -> dict[str, dict[str, Path]]:
    """Write `{split}.src`, `{split}.tgt` (one sentence a line), `{split}.src.conllu`,
    `{split}.tgt.conllu` and `{split}.src.tree` (one bracketed tree a line) for the splits
    `train`, `dev` and `test`. All sentences are distinct, so dev/test never occur in train.
    Returns `{split: {suffix: path}}`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    examples = generate_synthetic_corpus(n_train + n_dev + n_test, seed=seed, max_words=max_words)
    splits = {"train": examples[:n_train], "dev": examples[n_train:n_train + n_dev],
              "test": examples[n_train + n_dev:]}
    paths = {}
    for split, exs in splits.items():
        files = {suffix: out_dir / f"{split}.{suffix}" for suffix in ("src", "tgt", "src.conllu", "tgt.conllu", "src.tree")}
        contents = {
            "src": "".join(e.source + "\n" for e in exs),
            "tgt": "".join(e.target + "\n" for e in exs),
            "src.conllu": "".join(
                conllu_block(e.source.split(), e.source_heads, e.source_deprels,
                             [UPOS[x] for x in e.source_xpos], e.source_xpos, f"{split}-{k + 1}")
                for k, e in enumerate(exs)),
            "tgt.conllu": "".join(
                conllu_block(e.target.split(), e.target_heads, e.target_deprels,
                             _target_upos(e), None, f"{split}-{k + 1}")
                for k, e in enumerate(exs)),
            "src.tree": "".join(e.source_tree + "\n" for e in exs),
        }
        for suffix, path in files.items():
            path.write_text(contents[suffix], encoding="utf-8")
        paths[split] = files
    return paths


def _target_upos(example: SyntheticExample) -> list[str]:
    return [UPOS[example.source_xpos[i]] if i >= 0 else "ADP" for i in example.alignment]
