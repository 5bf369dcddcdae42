"""char_lm: character-level language modelling on any text file (nanoGPT's shakespeare_char).

task.data is a UTF-8 text file, or `builtin:NAME` for a corpus shipped gzipped in the package's
experiments/data/ (`builtin:tinyshakespeare`: the 1.1 MB tiny Shakespeare of char-rnn).
"""

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import torch

import attention

from ..config import attention_config
from ..errors import UsageError
from .base import Task

BUILTIN = "builtin:"
DATA_DIR = Path(__file__).resolve().parents[1] / "data"
CORPUS_BYTES = 24  # the most memory a byte of the corpus takes once read and tokenised (about 18.5 measured)
SAMPLE_BYTES = 40  # the most memory a sampled character takes: its token, its Python int and its character


def builtin_corpora():
    """Names of the corpora shipped in DATA_DIR (task.data = "builtin:NAME")."""
    return sorted(path.name.removesuffix(".txt.gz") for path in DATA_DIR.glob("*.txt.gz"))


def read_corpus(data):
    """The text task.data names: builtin:NAME (DATA_DIR/NAME.txt.gz, decompressed) or a UTF-8 file."""
    if not data:
        raise UsageError(
            "task char_lm needs a text file: set task.data (e.g. --set task.data=corpus.txt, "
            f"or {BUILTIN}tinyshakespeare)"
        )
    if data.startswith(BUILTIN):
        name = data.removeprefix(BUILTIN)
        if name not in builtin_corpora():
            raise UsageError(
                f"unknown built-in corpus {data!r}; built-in: {', '.join(BUILTIN + n for n in builtin_corpora())}"
            )
        return gzip.decompress((DATA_DIR / f"{name}.txt.gz").read_bytes()).decode("utf-8")
    path = Path(data)
    if not path.is_file():
        raise UsageError(f"data file not found: {path}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read {path} as UTF-8 text: {err}") from None


@dataclass
class CharLMOptions:
    val_fraction: float = 0.1  # the last 10 % of the file is the validation split
    sample_length: int = 500  # characters generated into sample.txt at the end (0: none)


def corpus_bytes(data: str) -> int:
    """The size of the text task.data names, in bytes, without reading it: a builtin corpus's uncompressed size
    (its gzip trailer), a file's size; 0 when there is none (read_corpus names the problem)."""
    if data.startswith(BUILTIN):
        name = data.removeprefix(BUILTIN)
        if name not in builtin_corpora():
            return 0
        with (DATA_DIR / f"{name}.txt.gz").open("rb") as file:
            file.seek(-4, os.SEEK_END)
            return int.from_bytes(file.read(4), "little")  # ISIZE: the size modulo 2^32, and the corpora are small
    try:
        return os.stat(data).st_size if data else 0
    except OSError:
        return 0


class CharLM(Task):
    name = "char_lm"
    Options = CharLMOptions
    metrics = ("val_loss",)

    @classmethod
    def check(cls, config):
        """The options (Task.check): train.batch_size >= 1, val_fraction in (0, 1), sample_length >= 0."""
        options = super().check(config)
        if config.train.batch_size < 1:
            raise UsageError(
                "task char_lm samples windows: train.batch_size must be >= 1 (0 means full batch, "
                "which only the finite tasks have)"
            )
        if not 0 < options.val_fraction < 1:
            raise UsageError(f"task.val_fraction must be in (0, 1), got {options.val_fraction}")
        if options.sample_length < 0:
            raise UsageError(f"task.sample_length must be >= 0 (0: no sample), got {options.sample_length}")
        return options

    @classmethod
    def data_parts(cls, config, options):
        """The corpus (its text, token list and token tensor: CORPUS_BYTES a byte of the file) and the sample
        (its token tensor, token list and text: SAMPLE_BYTES a character)."""
        return {
            f"task.data={config.task.data}: the corpus": CORPUS_BYTES * corpus_bytes(config.task.data),
            f"task.sample_length={options.sample_length}: the sample": SAMPLE_BYTES * options.sample_length,
        }

    def __init__(self, config):
        super().__init__(config)
        source = config.task.data
        text = read_corpus(source)
        self.chars = sorted(set(text))
        if len(self.chars) < 2:
            raise UsageError(
                f"{source} has {len(text)} characters and {len(self.chars)} distinct ones; "
                "a language model needs at least 2 distinct characters"
            )
        index = {c: i for i, c in enumerate(self.chars)}
        data = torch.tensor([index[c] for c in text], dtype=torch.long)
        n_train = int(len(data) * (1 - self.options.val_fraction))
        self.splits = {"train": data[:n_train], "val": data[n_train:]}
        block = config.train.block_size
        for split, tokens in self.splits.items():
            if len(tokens) <= block + 1:
                raise UsageError(
                    f"{source}: the {split} split has {len(tokens)} characters; block_size {block} "
                    f"needs more than {block + 1} (a longer file or a smaller train.block_size)"
                )
        self.tokens_per_example = block

    @property
    def vocab_size(self):
        return len(self.chars)

    def build_model(self):
        return attention.GPT(
            attention_config(self.config.model),
            self.vocab_size,
            self.config.train.block_size,
            self.config.model.n_layer,
        )

    def batch(self, split, batch_size, generator):
        """Random windows: x = data[i : i + T], y = data[i + 1 : i + 1 + T]."""
        data, T = self.splits[split], self.config.train.block_size
        starts = torch.randint(len(data) - T - 1, (batch_size,), generator=generator)
        x = torch.stack([data[i : i + T] for i in starts.tolist()])
        y = torch.stack([data[i + 1 : i + 1 + T] for i in starts.tolist()])
        return x, y

    def train_batch(self, generator):
        return self.batch("train", self.config.train.batch_size, generator)

    def loss(self, model, batch):
        logits, loss = model(*batch)
        return loss, logits

    @torch.no_grad()
    def evaluate(self, model, generator, device):
        losses = [
            self.loss(model, tuple(t.to(device) for t in self.batch("val", self.config.train.batch_size, generator)))[
                0
            ].item()
            for _ in range(self.config.train.eval_iters)
        ]
        return {"val_loss": sum(losses) / len(losses)}

    @torch.no_grad()
    def sample(self, model, generator, device):
        """sample_length characters generated from a newline (or the first character)."""
        start = self.chars.index("\n") if "\n" in self.chars else 0
        idx = torch.tensor([[start]], device=device)
        out = model.generate(idx, self.options.sample_length, top_k=None, generator=generator)
        return "".join(self.chars[i] for i in out[0].tolist())
