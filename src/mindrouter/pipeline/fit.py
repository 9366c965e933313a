"""Stage 9: count the input and cap the output so the request fits the model's context.

    remaining  = context_length - input_tokens - SAFETY_MARGIN
    max_tokens = min(requested, remaining, MAX_OUTPUT_TOKENS)

The count comes from the backend's own tokenizer where it has one (vLLM and llama.cpp render the
chat template, tools and special tokens exactly); otherwise from the gateway's estimate. When the
estimate says the request is far from the limit, the tokenizer round trip is skipped: a cap that
is generous by a few tokens does no harm there.

An input whose estimate is more than FAR_OVER times the context cannot fit on any backend of the
model, whatever tokenizer it has: it is refused as it is estimated (`refuse_far_over`, called by
`estimate.py`), before admission, an audit record or a backend tokenizer call, and the estimate
stops counting at that point (`estimate_limit`), so a 30 MB prompt costs a context's worth of
counting, not millions of tokens.
"""

from __future__ import annotations

import dataclasses

from mindrouter.backends.base import EngineAdapter
from mindrouter.canonical import ChatRequest, CompletionRequest
from mindrouter.errors import ContextLengthExceeded, UpstreamError
from mindrouter.observability.logging import log
from mindrouter.routing.catalog import ModelSpec

SAFETY_MARGIN = 1024
MAX_OUTPUT_TOKENS = 65536
# The estimate uses another tokenizer; treat it as this much too small before trusting it.
ESTIMATE_SLACK = 1.3
# ...and as at most this much too large: cl100k spends up to three or so times the tokens of a
# large-vocabulary tokenizer on some scripts, so only an estimate past this many contexts is
# refused without the backend's own count.
FAR_OVER = 4


def estimate_limit(spec: ModelSpec) -> int:
    """The estimate past which an input is refused unasked: counting can stop there."""
    return spec.context_length * FAR_OVER


def refuse_far_over(spec: ModelSpec, estimate: int) -> None:
    if estimate > estimate_limit(spec):
        raise ContextLengthExceeded(
            f"the input is more than {estimate_limit(spec)} tokens (estimated), but model "
            f"'{spec.name}' has a context of {spec.context_length} tokens; shorten the messages",
            input_tokens=estimate,
            context_length=spec.context_length,
        )


async def fit_context(
    req: ChatRequest | CompletionRequest,
    spec: ModelSpec,
    estimate: int,
    adapter: EngineAdapter,
) -> ChatRequest | CompletionRequest:
    """`req` (already carrying the backend's model name) with max_tokens capped; raises
    ContextLengthExceeded when the input alone leaves no room."""
    context = spec.context_length
    requested = req.sampling.max_tokens
    wanted = requested if requested is not None else 0
    input_tokens = estimate
    if estimate * ESTIMATE_SLACK + SAFETY_MARGIN + wanted >= context and isinstance(
        req, ChatRequest
    ):
        try:
            exact = await adapter.count_chat_tokens(req)
        except UpstreamError as exc:
            log.warning("tokenizer unavailable; using the estimate", error=exc.message)
            exact = None
        if exact is not None:
            input_tokens = exact
    remaining = context - input_tokens - SAFETY_MARGIN
    if remaining <= 0:
        raise ContextLengthExceeded(
            f"the input is {input_tokens} tokens, but model '{spec.name}' has a context of "
            f"{context} tokens of which {SAFETY_MARGIN} are kept for the reply; shorten the "
            "messages",
            input_tokens=input_tokens,
            context_length=context,
        )
    cap = min(remaining, MAX_OUTPUT_TOKENS)
    capped = cap if requested is None else min(requested, cap)
    if capped == requested:
        return req
    return dataclasses.replace(req, sampling=dataclasses.replace(req.sampling, max_tokens=capped))
