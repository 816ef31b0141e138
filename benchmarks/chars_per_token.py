"""How good is "1 token per 4 characters" (tuneplan.corpus.tokens.CHARS_PER_TOKEN) without a tokenizer?

No pretrained tokenizer can be downloaded here, so a real byte-level BPE (the GPT-2 / Llama-3 kind) is
trained offline with `tokenizers` on English prose at hand: the project's docs and README and the
license texts of /usr/share/common-licenses (when present). Paragraphs are split 80/20 at random; the
tokenizer learns on the 80%, and on the held-out 20% each paragraph's ceil(characters / 4) is compared
with its real token count.

    python benchmarks/chars_per_token.py [--vocab 8000 16000 32000]

Prints, per vocabulary size: characters per token over the held-out text, and the per-paragraph
relative error of the approximation (median of |approx - real| / real, and its 90th percentile), and
its error on the held-out text's total.
A vocabulary trained on half a megabyte is smaller and less fitted to general English than a 128k
production one, so its characters per token run lower (more tokens): the error found here is on the
side of caution for English prose; code and other languages differ more.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def paragraphs() -> list[str]:
    files = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
    lic = Path("/usr/share/common-licenses")
    if lic.is_dir():
        files += sorted(p for p in lic.iterdir() if p.is_file())
    out = []
    for f in files:
        for block in f.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            text = " ".join(block.split())
            if len(text) >= 80 and not text.startswith(("|", "```", "    ")):  # prose, not tables or code
                out.append(text)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, nargs="+", default=[8000, 16000, 32000])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from tokenizers import ByteLevelBPETokenizer

    paras = paragraphs()
    random.Random(args.seed).shuffle(paras)
    cut = int(0.8 * len(paras))
    train, test = paras[:cut], paras[cut:]
    print(f"{len(train)} training paragraphs ({sum(map(len, train)):,} characters), {len(test)} held out "
          f"({sum(map(len, test)):,} characters)")
    for vocab in args.vocab:
        tok = ByteLevelBPETokenizer()
        tok.train_from_iterator(train, vocab_size=vocab, min_frequency=2, show_progress=False)
        real = [len(e.ids) for e in tok.encode_batch(test)]
        errors = [abs(math.ceil(len(t) / 4) - r) / r for t, r in zip(test, real, strict=True)]
        cpt = sum(map(len, test)) / sum(real)
        q = statistics.quantiles(errors, n=10)
        total = sum(math.ceil(len(t) / 4) for t in test) / sum(real) - 1
        print(f"vocab {vocab:>6} ({tok.get_vocab_size()} learnt): {cpt:.2f} characters per token held out; "
              f"chars/4 per paragraph: median |error| {statistics.median(errors):.1%}, p90 {q[-1]:.1%}; "
              f"on the held-out total {total:+.1%}")


if __name__ == "__main__":
    main()
