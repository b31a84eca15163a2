"""How a round asks its hooks, and what it does with their answers.

`loop.py` runs the rounds: it calls the model app, and hands each answer to the methods here, which ask the gates
in hook order, refuse a round the safety rules forbid (the loop limit, tool calls seen before), call the plan
builder, and turn its plan into the next request body, an override or an end. The hooks of the request's two ends
(before the first call, after the last) and `call_hook`, through which every hook method is called, are in
`ends.py`.

They are methods of `AgenticLoop` (by inheritance) rather than of an object of their own, because both halves read
and change the same state of one request: its body, depth, limit, round record and why it ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, NamedTuple

from .closing import answered, claimed_calls, closing_body
from .dispatch import Answer
from .ends import CLEANUP_HOOK as CLEANUP_HOOK
from .ends import POST_HOOK as POST_HOOK
from .ends import REQUEST_HOOK as REQUEST_HOOK
from .ends import RequestEnds, has_internal_fields
from .ends import Rerun as Rerun
from .ends import is_internal_field as is_internal_field
from .errors import ConfigurationError, HookError
from .hooks import PLAN_PARAMETERS, AgenticLoopRequestPatch, BoundHook, as_plan, check_patch
from .payload import JSONObject, wrap
from .policy import claimed_names, denied_results
from .settings import loop_limit
from .surfaces import claims_of


def _claimed_calls(claim: Any) -> list[dict[str, Any]]:
    calls = claim.get("tool_calls") if isinstance(claim, (dict, Mapping)) else None
    return [call for call in calls if isinstance(call, dict)] if isinstance(calls, (list, tuple)) else []


_PAIRS = (tuple, list)  # a tuple, not `tuple | list`, which makes a new union object at every gate's answer


class Closing(NamedTuple):
    """The closing call a refused round makes (see closing.py): its body, and the hook whose claim was refused."""

    body: dict[str, Any]
    hook: BoundHook


class Denied(NamedTuple):
    """A round whose claim holds a call the tool policy refuses (policy.py): the body that answers every claimed
    call with an error result, and the hook whose claim it was; no plan runs."""

    body: dict[str, Any]
    hook: BoundHook


class AskingHooks(RequestEnds):
    """The hook side of `AgenticLoop` for each round: gates, plans, refusals, the next body."""

    __slots__ = ()  # its state is `RequestEnds`' and `AgenticLoop`'s

    async def ask_hooks(self, answer: Answer, response: JSONObject) -> Answer | Rerun | Closing | Denied:
        """One round: the first hook whose gate says yes and whose plan acts decides it."""
        # The calls the model made, not what a gate left of them in `response`: read before any gate is shown it
        # where that changes nothing in it, else from a fresh parse once a gate claims.
        fingerprint = self.surface.fingerprint(response) if self.surface.fingerprint_reads_only else None
        shown = _Shown(answer, response)
        for hook in self.hooks:
            kwargs = self.hook_kwargs()
            response = shown.next(self.has_gate(hook))
            claim = await self.ask_gate(hook, response, kwargs)
            if claim is None:
                continue
            if self.client.watcher is None:
                self.watch_client()
                # One turn of the event loop for the watcher: a client that left during the first call (a
                # disconnect already waiting in `receive`) ends the loop here, before any plan or rerun.
                await asyncio.sleep(0)
            self.round.tools = [str(self.surface.call_name(call)) for call in _claimed_calls(claim)]
            if fingerprint is None:
                fingerprint = self.surface.fingerprint(shown.as_sent())
            refusal = self.refusal(fingerprint)
            if refusal is not None:
                self.finish(refusal, hook)
                claims = claims_of([claim, *await self.other_claims(hook, shown)])
                sent = shown.as_sent()  # what a gate changed in `response` is not sent, nor closed on
                # A limit of 0 (set after the first call) allows no other model call: the claimed calls are removed.
                if self.settings.closing == "call" and not self.closed and self.limit:
                    self.closed = True
                    body = closing_body(self.surface, self.body, sent, claims, refusal, self.limit)
                    if body is not None:
                        return Closing(body, hook)
                ended = self.surface.without_claimed(sent, claims)
                return answer.replaced(self.surface.filled(ended, self.settings.closing_text))
            if self.policy is not None and self.policy.judges_names:
                denied = self.denied(hook, claim, answer, shown)
                if denied is not None:
                    self.seen += (fingerprint,)
                    return denied
            method = hook.plan_method(self.surface.plan_methods)
            if method is None:
                continue
            raw_plan = await self.call_hook(
                hook,
                method,
                tools=claim,
                model=self.body.get("model"),
                messages=self.surface.messages(self.body),
                response=response,
                **PLAN_PARAMETERS[method](self.surface.request_params(self.body)),
                logging_obj=self.logging_obj,
                stream=self.streaming,
                kwargs=kwargs,
            )
            plan = as_plan(raw_plan, hook, method)
            if plan.response_override is not None:
                self.finish("override", hook, plan.stop_reason)
                return self.overridden(answer, plan.response_override, hook, method)
            if plan.terminate:  # as LiteLLM: the post hook gets the answer without the calls this hook claimed
                self.finish("terminate", hook, plan.stop_reason)
                stripped = answer.replaced(self.surface.without_claimed(answer.as_sent(), claims_of([claim])))
                ending = Rerun(hook, method, raw_plan, AgenticLoopRequestPatch(), kwargs)
                return await self.post_processed(ending, stripped)
            if plan.run_agentic_loop:
                self.seen += (fingerprint,)
                return Rerun(hook, method, raw_plan, check_patch(plan.request_patch, hook, method), kwargs)
        if shown.shown and self.executed:  # the post hooks get the final answer as the app sent it, too
            return Answer(answer.start, answer.raw, shown.next(False), answer.rewritten)
        return answer

    def denied(self, hook: BoundHook, claim: Any, answer: Answer, shown: _Shown) -> Denied | Answer | None:
        """The round the tool policy makes of a claim holding a call the caller may not use: every claimed call gets
        an error result and the model is asked again, no plan runs (None: the claim is allowed). A claim that does
        not name its calls cannot be judged, and fails; one naming calls the answer does not hold ends the loop
        without them."""
        assert self.policy is not None
        names = claimed_names(claim)
        if names is None:
            gate = next(gate for gate in self.surface.gates if hook.methods[gate] is not None)
            raise HookError(
                hook.name,
                gate,
                "claimed calls without giving each one name in `tool_calls`: the tool policy cannot judge them",
            )
        if all(map(self.policy.allows, names)):
            return None
        self.round.tools = names
        sent, claims = shown.as_sent(), claims_of([claim])
        claimed = claimed_calls(self.surface, sent, claims)
        if not claimed:
            self.finish("denied", hook)
            ended = self.surface.without_claimed(sent, claims)
            return answer.replaced(self.surface.filled(ended, self.settings.closing_text))
        results = denied_results(self.surface, claimed, self.policy)
        return Denied(answered(self.surface, self.body, sent, claimed, results), hook)

    async def ask_gate(self, hook: BoundHook, response: JSONObject, kwargs: dict[str, Any]) -> Any:
        """The gate's claim when it says yes, else None; chat asks LiteLLM's chat-only gate first."""
        for gate in self.surface.gates:
            if hook.methods[gate] is None:
                continue
            result = await self.call_hook(
                hook,
                gate,
                response=response,
                model=self.body.get("model"),
                messages=self.surface.messages(self.body),
                tools=self.body.get("tools"),
                stream=self.streaming and self.settings.gates_see_stream,
                custom_llm_provider=self.provider,
                kwargs=kwargs,
            )
            if not isinstance(result, _PAIRS) or len(result) != 2:
                raise HookError(hook.name, gate, f"returned {result!r}, not a (bool, dict) pair")
            should_run, claim = result
            if should_run:
                return {} if claim is None else claim
        return None

    def has_gate(self, hook: BoundHook) -> bool:
        return hook.implements_any(self.surface.gates)

    async def other_claims(self, refused: BoundHook, shown: _Shown) -> list[Any]:
        """What the other hooks' gates claim, so that a refused round removes every server call."""
        asked = [
            await self.ask_gate(hook, shown.next(self.has_gate(hook)), self.hook_kwargs())
            for hook in self.hooks
            if hook is not refused
        ]
        return [claim for claim in asked if claim is not None]

    def refusal(self, fingerprint: tuple[tuple[str, bytes], ...]) -> str | None:
        """Why this round may not rerun, if it may not: the limit, or tool calls seen before (after a closing call,
        why it was made)."""
        if self.closed:
            return self.stop_reason
        if self.depth >= self.limit:
            return "limit"
        if fingerprint and fingerprint in self.seen:
            return "repeated_tool_calls"
        return None

    def overridden(self, answer: Answer, value: Any, hook: BoundHook, method: str) -> Answer:
        if isinstance(value, Mapping) and type(value) is not JSONObject:
            value = wrap(dict(value))
        elif not isinstance(value, Mapping) and not hasattr(value, "model_dump"):
            raise HookError(hook.name, method, f"response_override is {type(value).__name__}, not a JSON object")
        try:
            return answer.replaced(value)
        except TypeError as error:
            raise HookError(hook.name, method, f"response_override is not JSON: {error}") from None

    def patched(self, step: Rerun) -> dict[str, Any]:
        """The next request body: the patch over the current one, without a forced tool choice."""
        patch = step.patch
        body = {**self.body, **patch.optional_params}
        if "tool_choice" not in patch.optional_params:
            body.pop("tool_choice", None)
        for name, body_field in self.surface.patch_fields.items():
            value = getattr(patch, name)
            if value is not None:
                body[body_field] = value
        if patch.model is not None:
            # LiteLLM's hooks name the model as LiteLLM is called (`openai/gpt-x`); the app is called as the client did.
            if patch.model == f"{step.kwargs.get('custom_llm_provider')}/{self.body.get('model')}":
                body["model"] = self.body.get("model")
            params = self._logging_obj.model_call_details.get("agentic_loop_params") if self._logging_obj else None
            if isinstance(params, dict):
                params["model"] = body["model"]
        if has_internal_fields(body):  # looked for in C: a plan's patch rarely carries one
            for name in [name for name in body if is_internal_field(name)]:
                del body[name]
        if patch.kwargs:
            self.patch_kwargs = {**self.patch_kwargs, **patch.kwargs}
            if "max_agentic_loops" in patch.kwargs:
                try:
                    self.limit = loop_limit(
                        patch.kwargs["max_agentic_loops"], 'request_patch.kwargs["max_agentic_loops"]'
                    )
                except ConfigurationError as error:
                    raise HookError(step.hook.name, step.method, str(error)) from None
        return self.surface.rerun_body(body)

    def finish(self, reason: str, hook: BoundHook, plan_stop_reason: str | None = None) -> None:
        """Record why the loop ends; the observer reports it with the last round."""
        self.stop_reason = reason
        self.plan_stop_reason = plan_stop_reason
        self.round.hook = hook.name
        self.round.stop_reason = plan_stop_reason


class _Shown:
    """The answer as each gate of a round is shown it: the app's answer as it sent it, whatever an earlier gate
    changed in its own `response` (in place, as LiteLLM's hooks may). A gate that emptied or edited the answer it
    was shown, then declined, would otherwise hide the model's calls from the hooks after it, and the client would
    get a server tool's call. The first gate gets the round's parse; a later one a fresh parse of the bytes, made
    only once a gate has been shown the answer."""

    __slots__ = ("_answer", "_next", "_sent", "shown")

    def __init__(self, answer: Answer, response: JSONObject) -> None:
        self._answer = answer
        self._next: JSONObject | None = response
        self._sent: Any = None
        self.shown = False  # whether a gate was shown the answer

    def next(self, asked: bool) -> JSONObject:
        """The response for the next hook; `asked`: whether that hook has a gate that will be shown it."""
        if self._next is None:
            self._next = _parsed(self._answer)
        response = self._next
        if asked:
            self._next = None  # shown: the next gate gets its own
            self.shown = True
        return response

    def as_sent(self) -> Any:
        """The answer as the app sent it (parsed once per round, for the fingerprint and the refused round)."""
        if self._sent is None:
            self._sent = self._answer.as_sent()
        return self._sent


def _parsed(answer: Answer) -> JSONObject:
    sent = answer.as_sent()
    return sent if type(sent) is JSONObject else wrap(dict(sent))
