"""The demo's source language: the lexicon and rule probabilities of the synthetic grammar
(`hf_syntax_mt.features.synthetic` generates its sentences), and a parser for it.

`parse_grammar_sentence(words)` returns the most probable derivation of a sentence under the grammar's own
generative probabilities (Viterbi over the grammar's phrases), as the dependency tree and the bracketed
constituency tree the generator would have written. Where a sentence is ambiguous (a prepositional phrase or
a relative clause that could attach to more than one word) the more probable reading wins, so a parse can
differ from the tree the sentence was generated with. A word outside the lexicon, or words that are no
sentence of the grammar, raise `ValueError`. Pure Python.
"""

from __future__ import annotations

import functools
import math

DETERMINERS = "the this every some my your his her our their each no".split()
ADJECTIVES = (
    "big small old young red blue green black white happy sad quiet loud tall short "
    "long round soft hard warm cold bright dark clever lazy brave shy kind rude busy "
    "empty full heavy light rich poor strange famous gentle angry proud calm wild "
    "tiny huge fresh dry wet clean dirty sweet bitter friendly lonely careful curious"
).split()
NOUNS = (
    "cat dog bird horse cow sheep fish mouse rabbit fox bear wolf lion tiger monkey "
    "frog duck goat pig snake man woman boy girl child teacher student doctor farmer "
    "king queen baker singer painter driver soldier sailor writer friend neighbor "
    "house garden river forest mountain village city school market table chair door "
    "window box bag book letter picture song story cake apple bread cup bottle ball "
    "car boat train bridge road tree flower stone hat coat key lamp clock bed wall "
    "shop park lake island castle tower kitchen field hill beach station library "
    "museum hospital office ship"
).split()
TRANSITIVE_VERBS = (
    "saw liked chased found took made bought sold carried pushed pulled painted "
    "watched followed helped visited opened closed washed cooked ate drew wrote read "
    "held kept met heard caught threw built broke fixed moved called loved hated "
    "cleaned touched brought needed wanted"
).split()
INTRANSITIVE_VERBS = (
    "slept ran walked laughed cried smiled jumped danced sang swam waited fell "
    "arrived left stayed worked played rested shouted whispered"
).split()
ADVERBS = "quickly slowly quietly loudly happily sadly carefully suddenly often again".split()
PREPOSITIONS = "in on under near behind with from to above beside".split()
CONJUNCTIONS = "and or but".split()
NOUN_CONJUNCTIONS = CONJUNCTIONS[:2]
RELATIVIZER = "that"
FULL_STOP = "."

# The generator's draws: a phrase at embedding depth d takes an optional part with probability p * DEPTH_DECAY ** d.
P_ADJECTIVE = 0.35  # another adjective (at most MAX_ADJECTIVES)
MAX_ADJECTIVES = 2
P_NOUN_PP, P_RELATIVE, P_NOUN_COORDINATION = 0.3, 0.25, 0.12  # depth-decayed
P_TRANSITIVE = 0.65
P_VERB_PP = 0.3  # depth-decayed
P_ADVERB = 0.15
P_SUBJECT_RELATIVE = 0.6
P_VERB_COORDINATION = 0.12
DEPTH_DECAY = 0.5

_TAGS = {"DT": DETERMINERS, "JJ": ADJECTIVES, "NN": NOUNS, "IN": PREPOSITIONS, "RB": ADVERBS}


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -math.inf


def _lexicon_tags(word: str) -> set[str]:
    tags = {tag for tag, words in _TAGS.items() if word in words}
    if word in TRANSITIVE_VERBS:
        tags.add("VBT")
    if word in INTRANSITIVE_VERBS:
        tags.add("VBI")
    if word in CONJUNCTIONS:
        tags.add("CC")
    if word == RELATIVIZER:
        tags.add("WDT")
    if word == FULL_STOP:
        tags.add(".")
    return tags


class _Parse:
    """Viterbi parse of one sentence: every phrase function maps a start position to {end: best analysis},
    an analysis being (log probability, head, arcs, tree); arcs are (dependent, head, relation) triples and a
    tree is (label, children) with leaves (tag, position)."""

    def __init__(self, words: list[str]):
        self.words = [word.lower() for word in words]
        self.tags = [_lexicon_tags(word) for word in self.words]
        self.n = len(words)
        for phrase in ("noun_phrase", "prepositional_phrase", "verb_phrase", "relative_clause"):
            setattr(self, phrase, functools.lru_cache(maxsize=None)(getattr(self, phrase)))

    def word(self, i: int, tag: str, choices: int):
        """The leaf at `i` if the word there has `tag`, with log(1 / choices) (the generator's uniform draw)."""
        if i < self.n and tag in self.tags[i]:
            return -math.log(choices), ("VBD" if tag.startswith("VB") else tag, i)
        return None

    @staticmethod
    def best(found: dict, end: int, analysis) -> None:
        if end not in found or analysis[0] > found[end][0]:
            found[end] = analysis

    @staticmethod
    def optional(p: float):
        return ((False, _log(1 - p)), (True, _log(p)))

    def noun_phrase(self, i: int, depth: int, coordinate: bool = True) -> dict:
        det = self.word(i, "DT", len(DETERMINERS))
        if det is None:
            return {}
        bases, j, logp, adjectives = {}, i + 1, det[0], []
        for count in range(MAX_ADJECTIVES + 1):
            noun = self.word(j, "NN", len(NOUNS))
            stop = 0.0 if count == MAX_ADJECTIVES else _log(1 - P_ADJECTIVE)
            if noun is not None:
                tree = ("NP", [det[1], *adjectives, noun[1]])
                arcs = ((i, j, "det"), *((a[1], j, "amod") for a in adjectives))
                bases[j + 1] = (logp + stop + noun[0], j, arcs, tree)
            adjective = self.word(j, "JJ", len(ADJECTIVES))
            if count == MAX_ADJECTIVES or adjective is None:
                break
            logp += _log(P_ADJECTIVE) + adjective[0]
            adjectives.append(adjective[1])
            j += 1
        decay = DEPTH_DECAY ** depth
        p_coordination = P_NOUN_COORDINATION * decay if coordinate else 0.0
        found = {}
        for end, base in bases.items():
            for end2, with_pp in self._attached(base, end, P_NOUN_PP * decay,
                                                lambda k: self.prepositional_phrase(k, depth + 1), "nmod"):
                for end3, analysis in self._attached(with_pp, end2, P_RELATIVE * decay,
                                                     lambda k: self.relative_clause(k, depth + 1), "acl:relcl"):
                    self.best(found, end3, (analysis[0] + _log(1 - p_coordination), *analysis[1:]))
                    if coordinate:
                        self._coordinate(found, analysis, end3, p_coordination, NOUN_CONJUNCTIONS,
                                         lambda k: self.noun_phrase(k, depth + 1, coordinate=False), "NP")
        return found

    def _attached(self, analysis, end: int, p: float, phrase, relation: str):
        """(end, analysis) without and with an optional phrase (drawn with probability `p`) attached to the head."""
        logp, head, arcs, tree = analysis
        yield end, (logp + _log(1 - p), head, arcs, tree)
        if p <= 0:
            return
        for end2, (logp2, head2, arcs2, tree2) in phrase(end).items():
            yield end2, (logp + _log(p) + logp2, head, arcs + arcs2 + ((head2, head, relation),),
                         (tree[0], [tree, tree2]))

    def _coordinate(self, found: dict, analysis, end: int, p: float, conjunctions, phrase, label: str) -> None:
        conjunction = self.word(end, "CC", len(conjunctions))
        if conjunction is None or self.words[end] not in conjunctions:
            return
        logp, head, arcs, tree = analysis
        for end2, (logp2, head2, arcs2, tree2) in phrase(end + 1).items():
            self.best(found, end2, (logp + _log(p) + conjunction[0] + logp2, head,
                                    arcs + arcs2 + ((end, head2, "cc"), (head2, head, "conj")),
                                    (label, [tree, conjunction[1], tree2])))

    def prepositional_phrase(self, i: int, depth: int) -> dict:
        preposition = self.word(i, "IN", len(PREPOSITIONS))
        if preposition is None:
            return {}
        return {end: (preposition[0] + logp, head, arcs + ((i, head, "case"),), ("PP", [preposition[1], tree]))
                for end, (logp, head, arcs, tree) in self.noun_phrase(i + 1, depth).items()}

    def verb_phrase(self, i: int, depth: int, gap: bool = False) -> dict:
        starts = []
        transitive = self.word(i, "VBT", len(TRANSITIVE_VERBS))
        if transitive is not None:
            draw = 0.0 if gap else _log(P_TRANSITIVE)
            if gap:
                starts.append((i + 1, (draw + transitive[0], i, (), [transitive[1]])))
            else:
                for end, (logp, head, arcs, tree) in self.noun_phrase(i + 1, depth + 1).items():
                    starts.append((end, (draw + transitive[0] + logp, i, arcs + ((head, i, "obj"),),
                                         [transitive[1], tree])))
        intransitive = None if gap else self.word(i, "VBI", len(INTRANSITIVE_VERBS))
        if intransitive is not None:
            starts.append((i + 1, (_log(1 - P_TRANSITIVE) + intransitive[0], i, (), [intransitive[1]])))
        found = {}
        p_pp = P_VERB_PP * DEPTH_DECAY ** depth
        for end, (logp, head, arcs, children) in starts:
            options = [(end, logp + _log(1 - p_pp), arcs, children)]
            for end2, (logp2, head2, arcs2, tree2) in self.prepositional_phrase(end, depth + 1).items():
                options.append((end2, logp + _log(p_pp) + logp2, arcs + arcs2 + ((head2, i, "obl"),),
                                [*children, tree2]))
            for end2, logp2, arcs2, children2 in options:
                self.best(found, end2, (logp2 + _log(1 - P_ADVERB), i, arcs2, ("VP", children2)))
                adverb = self.word(end2, "RB", len(ADVERBS))
                if adverb is not None:
                    self.best(found, end2 + 1, (logp2 + _log(P_ADVERB) + adverb[0], i,
                                                arcs2 + ((end2, i, "advmod"),),
                                                ("VP", [*children2, ("ADVP", [adverb[1]])])))
        return found

    def relative_clause(self, i: int, depth: int) -> dict:
        that = self.word(i, "WDT", 1)
        if that is None:
            return {}
        found = {}
        for end, (logp, head, arcs, tree) in self.verb_phrase(i + 1, depth).items():  # "that chased the dog"
            self.best(found, end, (_log(P_SUBJECT_RELATIVE) + logp, head, arcs + ((i, head, "nsubj"),),
                                   ("SBAR", [("WHNP", [that[1]]), ("S", [tree])])))
        for end, (logp, subject, arcs, subject_tree) in self.noun_phrase(i + 1, depth, coordinate=False).items():
            for end2, (logp2, head, arcs2, tree) in self.verb_phrase(end, depth, gap=True).items():  # "that the dog chased"
                self.best(found, end2, (_log(1 - P_SUBJECT_RELATIVE) + logp + logp2, head,
                                        arcs + arcs2 + ((i, head, "obj"), (subject, head, "nsubj")),
                                        ("SBAR", [("WHNP", [that[1]]), ("S", [subject_tree, tree])])))
        return found

    def sentence(self):
        """The best analysis of all the words as one sentence, or None."""
        best = None
        for end, (logp, subject, arcs, subject_tree) in self.noun_phrase(0, 0).items():
            verb_phrases = {}
            for end2, analysis in self.verb_phrase(end, 0).items():
                self.best(verb_phrases, end2, (analysis[0] + _log(1 - P_VERB_COORDINATION), *analysis[1:]))
                self._coordinate(verb_phrases, analysis, end2, P_VERB_COORDINATION, CONJUNCTIONS,
                                 lambda k: self.verb_phrase(k, 1), "VP")
            stop = self.n - 1
            if stop not in verb_phrases or "." not in self.tags[stop]:
                continue
            logp2, verb, arcs2, tree = verb_phrases[stop]
            analysis = (logp + logp2, verb, arcs + arcs2 + ((subject, verb, "nsubj"), (stop, verb, "punct")),
                        ("ROOT", [("S", [subject_tree, tree, (".", stop)])]))
            if best is None or analysis[0] > best[0]:
                best = analysis
        return best


def parse_grammar_sentence(words: list[str]) -> tuple[list[int], list[str], list[str], str]:
    """(heads, deprels, xpos, bracketed tree) of the most probable derivation of `words` (one sentence of the
    demo grammar, matched case-insensitively): heads 0-based with the root pointing to itself, Penn tags
    (VBD for verbs). `ValueError` names an unknown word, or says the words are no sentence of the grammar."""
    if not words:
        raise ValueError("no words to parse")
    parse = _Parse(words)
    unknown = next((word for word, tags in zip(words, parse.tags) if not tags), None)
    if unknown is not None:
        raise ValueError(f"{unknown!r} is not a word of the demo grammar (hf_syntax_mt.features.synthetic)")
    best = parse.sentence()
    if best is None:
        raise ValueError(f"{' '.join(words)!r} is not a sentence of the demo grammar (hf_syntax_mt.features.synthetic)")
    _, root, arcs, tree = best
    heads, deprels = list(range(len(words))), ["root"] * len(words)
    for dependent, head, relation in arcs:
        heads[dependent], deprels[dependent] = head, relation
    xpos = [""] * len(words)

    def bracket(node) -> str:
        label, children = node
        if isinstance(children, int):
            xpos[children] = label
            return f"({label} {words[children]})"
        return f"({label} " + " ".join(bracket(child) for child in children) + ")"

    return heads, deprels, xpos, bracket(tree)
