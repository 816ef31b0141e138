"""Small datasets and a tiny tokenizer for the tests of `--data` and `tuneplan data`, written on demand
(nothing is shipped): `python tests/sample_data.py DIR` writes the README's example into DIR.

The tokenizer is a BPE trained offline on WORDS with a whitespace pre-tokenizer and a vocabulary large
enough that every word of WORDS is one token: a text of those words has as many tokens as words, plus
one BOS token added as a special token, so counts are checked by hand. Its folder form (`tok/`) is a
transformers tokenizer with a chat template whose role markers and end marker are one token each."""

from __future__ import annotations

import json
import sys
from pathlib import Path

WORDS = ("the", "model", "learns", "from", "data", "what", "is", "a", "token", "answer", "question", "tell",
         "me", "about", "gpus", "memory", "long", "short", "yes", "no", "please", "explain", "padding")
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|> {% endif %}")
SPECIALS = ("<bos>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>", "<pad>")


def train_tokenizer(folder: Path) -> Path:
    """tokenizer.json (BOS added to every encoding) and a transformers folder `folder/tok` with the chat
    template; returns the tokenizer.json path."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=list(SPECIALS), show_progress=False)
    tok.train_from_iterator([" ".join(WORDS)] * 20, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 0)])
    path = folder / "tokenizer.json"
    tok.save(str(path))
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(str(path)), bos_token="<bos>",
                                 pad_token="<pad>", additional_special_tokens=list(SPECIALS[1:5]))
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(str(folder / "tok"))
    return path


def sentence(n: int, start: int = 0) -> str:
    """n words of WORDS (n tokens with the tiny tokenizer, n + 1 with its BOS)."""
    return " ".join(WORDS[(start + i) % len(WORDS)] for i in range(n))


CHAT_ROWS = [  # (user words, assistant words)
    (3, 5), (4, 20), (2, 2), (6, 9), (3, 40), (5, 7), (2, 3), (8, 11),
]


def chat_rows() -> list[dict]:
    return [{"messages": [{"role": "user", "content": sentence(u, i)},
                          {"role": "assistant", "content": sentence(a, i + 1)}]} for i, (u, a) in enumerate(CHAT_ROWS)]


def long_tail_rows(n: int = 600, seed: int = 0) -> list[dict]:
    """Prompt/completion rows of log-normal length (median ~450 words) and a long tail: one row in 150
    has 12,000 words or so, the "OOM at step N" example of the README."""
    import random

    rng = random.Random(seed)
    rows = []
    for i in range(n):
        words = 12_000 + rng.randrange(2000) if i % 150 == 77 else max(8, int(rng.lognormvariate(6.1, 0.5)))
        p = max(2, words // 8)
        rows.append({"prompt": sentence(p, i), "completion": " " + sentence(words - p, i + 1)})
    return rows


def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_all(folder: Path) -> dict[str, Path]:
    """Every shape and file type the tests read, and the tokenizer; {name: path}."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    out = {"tokenizer": train_tokenizer(folder), "tokenizer_dir": folder / "tok"}
    out["chat"] = write_jsonl(folder / "chat.jsonl", chat_rows())
    out["long_tail"] = write_jsonl(folder / "long_tail.jsonl", long_tail_rows())
    pc = [{"prompt": sentence(p), "completion": " " + sentence(c, 3)} for p, c in ((2, 3), (4, 1), (1, 6))]
    out["prompt_completion"] = write_jsonl(folder / "pc.jsonl", pc)
    text = [{"text": sentence(n)} for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)]
    out["text_csv"] = folder / "text.csv"
    pd.DataFrame(text).to_csv(out["text_csv"], index=False)
    out["text_parquet"] = folder / "text.parquet"
    pd.DataFrame(text).to_parquet(out["text_parquet"], index=False)
    out["alpaca_json"] = folder / "alpaca.json"
    out["alpaca_json"].write_text(json.dumps([{"instruction": sentence(3), "input": sentence(2), "output": sentence(4)},
                                              {"instruction": sentence(2), "input": "", "output": sentence(1)}]))
    pref = [{"prompt": sentence(2), "chosen": " " + sentence(3), "rejected": " " + sentence(6)}]
    out["preference"] = write_jsonl(folder / "pref.jsonl", pref)
    out["rl"] = write_jsonl(folder / "rl.jsonl", [{"prompt": sentence(4)}, {"prompt": sentence(7)}])
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_list(text)
    out["saved"] = folder / "saved"
    datasets.DatasetDict({"train": ds}).save_to_disk(str(out["saved"]))
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-data")
    for name, p in write_all(target).items():
        print(f"{name}: {p}")
