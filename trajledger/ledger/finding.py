"""`Finding`: an episode of a holdout / regression batch that duplicates a train episode, and
its message (``ledger.contamination`` finds them); `duplicate_lines`: the episodes of a set
that duplicate earlier ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .batch_features import BatchFeatures

__all__ = ["Finding", "duplicate_lines"]

_NTH = {2: "second", 3: "third", 4: "fourth", 5: "fifth"}
_ADDED = {("clock",): "a clock column (the step number or a time)",
          ("standing",): "a column of one value (a task id, a bias) or earlier frames (a "
                         "frame stack)",
          ("clock", "standing"): "a clock column and a column of one value or earlier frames"}


@dataclass(frozen=True)
class Finding:
    """An episode of a holdout / regression batch that duplicates a train episode.

    Attributes:
        kind: ``exact`` (same content fingerprint, or same normalised text fingerprint:
            ``normalised``) or ``near`` (similar features).
        similarity: cosine similarity of the feature vectors (1.0 for exact).
        train_batch / train_episode: the best-matching train episode.
        other_batch / other_episode: the holdout or regression episode.
        matches: how many train episodes match it (exactly, or at the near threshold).
        train_datasets / other_datasets: ``"<split> NAME@VERSION"`` of the recorded datasets
            holding each batch.
    """

    kind: str
    similarity: float
    train_batch: str
    train_episode: str
    other_batch: str
    other_episode: str
    matches: int = 1
    train_datasets: tuple[str, ...] = field(default=())
    other_datasets: tuple[str, ...] = field(default=())
    normalised: bool = False
    """An exact duplicate once text is normalised (`text_fingerprint`), not byte for byte."""
    shared: tuple[int, int, int] | None = None
    """A train episode shares a run of observations with it (`step_windows`): its first and
    last step shared (counted from 1) and its number of steps; ``exact`` too."""
    every: int = 1
    """The run is of every ``every``-th of those steps (a frame-skipped copy)."""
    reversed: bool = False
    """The run is of those steps in reverse order (a copy reversed in time)."""
    columns: bool = False
    """The run is of those steps with their observation's columns reordered or some repeated
    (`step_windows.COLUMNS`; of an image, its frames flipped, their channels reordered or
    rescaled: `image_windows`)."""
    added: tuple[str, ...] = ()
    """Columns the train episode has and the held one has not, left out to match (copy35):
    ``clock`` (a column that counts the steps: `step_windows.clock_columns`), ``standing``
    (one of one value throughout its episode: `standing_columns`). Known of the train side's
    windows only: a held episode recorded with a clock and copied without says none."""

    def __str__(self) -> str:
        more = f" and {self.matches - 1} more" if self.matches > 1 else ""
        o = f" ({', '.join(self.other_datasets)})" if self.other_datasets else ""
        t = f" ({', '.join(self.train_datasets)})" if self.train_datasets else ""
        train = f"train episode {self.train_episode} of batch {self.train_batch[:19]}…{t}"
        if self.shared is not None:
            a, b, n = self.shared
            of = (f"every {_NTH.get(self.every, f'{self.every}th')} step of " if self.every > 1
                  else "")
            steps = f"steps {b}-{a}" if self.reversed else f"steps {a}-{b}"
            return (
                f"{train} shares {(b - a) // self.every + 1} consecutive steps ({of}{steps} of "
                f"{n} of held-out episode {self.other_episode} of batch {self.other_batch[:19]}…"
                f"{o}){more.replace(' more', ' more train episodes')}: a copy of a run of its "
                "observations (equal to 3 significant digits)"
                + (", reversed in time" if self.reversed else "")
                + (", its columns reordered or duplicated (of an image: its frames flipped, "
                   "their channels reordered or rescaled)" if self.columns else "")
                + (f", with {_ADDED[self.added]} added" if self.added in _ADDED else "")
            )
        what = (
            "an exact duplicate" + (" once text is normalised (Unicode NFKC, case, white "
                                    "space, the system prompt)" if self.normalised else "")
            if self.kind == "exact"
            else f"a near duplicate (similarity {self.similarity:.4f})"
        )
        return (f"episode {self.other_episode} of batch {self.other_batch[:19]}…{o} is {what} "
                f"of {train}{more}")

    def to_json(self) -> dict[str, Any]:
        """The finding as JSON."""
        out = asdict(self)
        out["train_datasets"], out["other_datasets"] = (
            list(self.train_datasets),
            list(self.other_datasets),
        )
        if not self.normalised:
            del out["normalised"]  # the JSON of a byte-for-byte finding is what it was
        if self.shared is None:
            del out["shared"]
        else:
            out["shared"] = list(self.shared)
        out["added"] = list(self.added)
        for key, plain in (("every", 1), ("reversed", False), ("columns", False), ("added", [])):
            if out[key] == plain:
                del out[key]  # the JSON of a run as recorded is what it was
        return out


def duplicate_lines(features: Sequence[BatchFeatures]) -> list[str]:
    """Episodes whose content equals an earlier one's (the same fingerprint).

    Batches are taken in digest order and episodes in id order, so the report is stable.

    Returns:
        One line per batch holding duplicates of another's (or its own) episodes: the episode
        itself when it is one, else how many and what to do (a dataset appended to and
        recorded whole again duplicates every episode of the first batch: one line, not
        thousands).
    """
    seen: dict[str, tuple[str, str]] = {}
    sizes = {f.batch: len(f.chunk.episode_ids) for f in features if f.chunk is not None}
    pairs: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for f in sorted(features, key=lambda f: f.batch):
        if f.chunk is None:
            continue
        for episode, fp in sorted(zip(f.chunk.episode_ids, f.chunk.fingerprints, strict=True)):
            first = seen.setdefault(fp, (f.batch, episode))
            if first != (f.batch, episode):
                pairs.setdefault((f.batch, first[0]), []).append((episode, first[1]))
    return [_duplicates(b, a, eps, sizes) for (b, a), eps in pairs.items()]


def _duplicates(b: str, a: str, eps: list[tuple[str, str]], sizes: dict[str, int]) -> str:
    """The line of the episodes ``eps`` (its id, the id it duplicates) of batch ``b`` that
    duplicate episodes of batch ``a``."""
    (episode, first), n = eps[0], len(eps)
    line = (f"episode {episode!r} of batch {b[:19]}… duplicates episode {first!r} of batch "
            f"{a[:19]}…")
    if n == 1:
        return line
    if a == b:
        return f"{line}, and {n - 1} more of its episodes duplicate others of it"
    why = (f"{n} episodes of batch {b[:19]}… duplicate episodes of batch {a[:19]}… (episode "
           f"{episode!r} duplicates episode {first!r}, …)")
    for whole, other in ((a, b), (b, a)):
        if len({e[1] if whole == a else e[0] for e in eps}) == sizes[whole]:
            return (f"{why}: every episode of batch {whole[:19]}… is also in batch "
                    f"{other[:19]}… (a dataset appended to and recorded whole again?): leave "
                    f"batch {whole[:19]}… out of the next version, or record only the new episodes")
    return f"{why}: record each episode in one batch only"
