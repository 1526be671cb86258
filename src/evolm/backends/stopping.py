"""When local generation stops, and who hears of it: the tokens ``model.generate`` stops on, a stopping criterion
that stops nothing but reports the rows that ended and the tokens decoded, and a progress bar over both
(``HFBackend.generate``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from evolm.backends.base import BAR_REFRESH_S


class RowsEnded:
    """A stopping criterion that stops nothing: after each decoding step it tells ``on_tokens`` how many rows were
    still generating (one token each) and ``on_rows`` how many rows of the batch ended (their last token one of
    ``stop_ids``) since the step before, and at ``finish`` the rows that never ended (the budget)."""

    def __init__(self, stop_ids: list[int], rows: int, on_rows: Callable[[int], None] | None,
                 on_tokens: Callable[[int], None] | None = None) -> None:
        self.stop_ids, self.on_rows, self.on_tokens = torch.tensor(stop_ids, dtype=torch.long), on_rows, on_tokens
        self.ended = torch.zeros(rows, dtype=torch.bool)

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        if self.on_tokens is not None:
            self.on_tokens(int((~self.ended).sum()))
        now = torch.isin(input_ids[:, -1].cpu(), self.stop_ids) & ~self.ended
        if now.any():
            self.ended |= now
            if self.on_rows is not None:
                self.on_rows(int(now.sum()))
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def finish(self) -> None:
        if (left := int((~self.ended).sum())) > 0:
            self.ended[:] = True
            if self.on_rows is not None:
                self.on_rows(left)


def with_bar(bar: Any, on_rows: Callable[[int], None] | None, on_tokens: Callable[[int], None] | None
              ) -> tuple[Callable[[int], None], Callable[[int], None]]:
    """``on_rows`` / ``on_tokens`` that also move ``bar``: a row per finished reply, the tokens so far beside it."""
    state = {"tokens": 0, "drawn": 0.0}

    def rows(n: int) -> None:
        bar.update(n)
        if on_rows is not None:
            on_rows(n)

    def tokens(n: int) -> None:
        state["tokens"] += n
        bar.set_postfix_str(f"{state['tokens']} tokens", refresh=False)
        if (now := time.monotonic()) - state["drawn"] >= BAR_REFRESH_S:
            state["drawn"] = now
            bar.refresh()
        if on_tokens is not None:
            on_tokens(n)
    return rows, tokens


def generation_stop_ids(model: Any, tokenizer: Any, eos: Any = None) -> list[int]:
    """The tokens ``generate`` stops on: ``eos`` if given, else the model's generation config's, else the
    tokenizer's EOS."""
    if eos is None:
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    return [int(i) for i in ids]
