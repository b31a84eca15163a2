"""The agentic loop of one client request: the same code for both routes.

Each round buffers the model app's answer, asks the hooks in order, and
either ends with one response to the client or re-dispatches a patched
request to the app. Safety (the loop limit, repeated tool calls) is checked
after a gate says yes and before its plan is built.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .asgi import ResponseCapture, replay, with_length, without
from .config import Settings, loop_limit
from .errors import ConfigurationError, HookError, LoopError, ModelAppError
from .hooks import AgenticLoopLogging, AgenticLoopRequestPatch, BoundHook, as_plan, check_patch
from .payload import JSONObject, dumps, parse_object, wrap
from .surfaces import Surface, claims_of

logger = logging.getLogger("agentic_middleware")

POST_HOOK = "async_post_agentic_loop_response_hook"
CLEANUP_HOOK = "async_agentic_loop_cleanup_hook"


def is_internal_field(name: str) -> bool:
    """Body fields that only trusted server code may set; a client's are removed."""
    return name == "max_agentic_loops" or name.startswith("_agentic_")


class Reply(NamedTuple):
    """The one response the client gets: a start message and the whole body."""

    start: Message
    body: bytes


class Answer:
    """One buffered answer of the model app, parsed once."""

    def __init__(self, start: Message, body: bytes) -> None:
        self.start = start
        self.body = body
        self.data: JSONObject | None = parse_object(body)
        self.changed = False

    def reply(self) -> Reply:
        """The answer as the app sent it, or re-serialized if a post hook changed it."""
        return self.replace(self.data) if self.changed else Reply(self.start, self.body)

    def replace(self, body: Any) -> Reply:
        """This answer's status and headers around another body."""
        raw = dumps(body)
        return Reply({**self.start, "headers": with_length(self.start["headers"], len(raw))}, raw)


class Rerun(NamedTuple):
    hook: BoundHook
    plan: Any
    patch: AgenticLoopRequestPatch
    kwargs: dict[str, Any]


class AgenticLoop:
    """Holds one client request's state from its first dispatch to its one response."""

    def __init__(
        self,
        app: ASGIApp,
        hooks: Sequence[BoundHook],
        settings: Settings,
        surface: Surface,
        scope: Scope,
        receive: Receive,
        send: Send,
        body: dict[str, Any],
    ) -> None:
        self.app = app
        self.hooks = hooks
        self.settings = settings
        self.surface = surface
        self.scope = scope
        self.receive = receive
        self.send = send
        self.body = body
        # Routers change the scope they are given: every call starts from this copy.
        self.call_scope: Scope = {
            **scope,
            "headers": without(scope["headers"], frozenset((b"accept-encoding",))),
            "state": scope.setdefault("state", {}),
        }
        self.provider = settings.provider(surface)
        self.limit = settings.max_agentic_loops
        self.depth = 0
        self.seen: set[tuple[tuple[str, bytes], ...]] = set()
        self.patch_kwargs: dict[str, Any] = {}
        self.executed: list[Rerun] = []
        self.stop_reason = "finished"
        call_id = str(uuid.uuid4())
        self.logging_obj = AgenticLoopLogging(
            litellm_call_id=call_id,
            route=surface.name,
            logger=logging.LoggerAdapter(logger, {"litellm_call_id": call_id}),
        )

    @property
    def call_id(self) -> str:
        return self.logging_obj.litellm_call_id

    async def run(self, raw: bytes) -> None:
        """Answer the client exactly once, and run every executed plan's cleanup hook."""
        reply: Reply | None = None
        try:
            reply = await self.rounds(raw)
        except LoopError as error:
            reply = self.error_reply(error)
        finally:
            await self.clean_up()
        if reply is not None:
            await self.send(reply.start)
            await self.send({"type": "http.response.body", "body": reply.body})

    async def rounds(self, raw: bytes) -> Reply | None:
        """The loop itself; None when an answer already went to the client as the app sent it."""
        answer = await self.call_app(raw)
        if answer is None:
            return None
        self.limit = self.request_limit()
        while answer.data is not None:
            step = await self.ask_hooks(answer, answer.data)
            if isinstance(step, Reply):
                return step
            self.executed.append(step)
            self.body = self.patched(step.patch, step.hook)
            self.depth += 1
            answer = await self.call_app(dumps(self.body))
            if answer is None:
                self.stop_reason = "app_answer"
                return None
            if answer.data is not None:
                await self.post_process(step, answer)
        if self.depth:
            self.stop_reason = "app_answer"
        return answer.reply()

    async def ask_hooks(self, answer: Answer, response: JSONObject) -> Reply | Rerun:
        """One round: the first hook whose gate says yes and whose plan acts decides it."""
        method = self.surface.plan_method
        for hook in self.hooks:
            kwargs = self.hook_kwargs()
            claim = await self.ask_gate(hook, response, kwargs)
            if claim is None:
                continue
            refusal = self.refusal(response)
            if refusal is not None:
                self.finish(refusal, hook)
                claims = claims_of([claim, *await self.other_claims(hook, response)])
                return answer.replace(self.surface.without_claimed(response, claims))
            raw_plan = await hook.call(
                method,
                tools=claim,
                model=self.body.get("model"),
                messages=self.body.get("messages"),
                response=response,
                **self.surface.plan_arguments(self.optional_params()),
                logging_obj=self.logging_obj,
                stream=False,
                kwargs=kwargs,
            )
            plan = as_plan(raw_plan, hook, method)
            if plan.response_override is not None:
                self.finish("override", hook, plan.stop_reason)
                return answer.replace(self.override(plan.response_override, hook, method))
            if plan.terminate:
                self.finish("terminate", hook, plan.stop_reason)
                return answer.reply()
            if plan.run_agentic_loop:
                self.seen.add(self.fingerprint(response))
                return Rerun(hook, raw_plan, check_patch(plan.request_patch, hook, method), kwargs)
        self.finish("finished")
        return answer.reply()

    async def ask_gate(self, hook: BoundHook, response: JSONObject, kwargs: dict[str, Any]) -> Any:
        """The gate's claim when it says yes, else None; chat asks LiteLLM's chat-only gate first."""
        for gate in self.surface.gates:
            if hook.methods[gate] is None:
                continue
            result = await hook.call(
                gate,
                response=response,
                model=self.body.get("model"),
                messages=self.body.get("messages"),
                tools=self.body.get("tools"),
                stream=False,
                custom_llm_provider=self.provider,
                kwargs=kwargs,
            )
            if not isinstance(result, tuple | list) or len(result) != 2:
                raise HookError(hook.name, gate, f"returned {result!r}, not a (bool, dict) pair")
            should_run, claim = result
            if should_run:
                return {} if claim is None else claim
        return None

    async def other_claims(self, refused: BoundHook, response: JSONObject) -> list[Any]:
        """What the other hooks' gates claim, so that a refused round removes every server call."""
        claims = []
        for hook in self.hooks:
            if hook is not refused:
                claim = await self.ask_gate(hook, response, self.hook_kwargs())
                if claim is not None:
                    claims.append(claim)
        return claims

    def refusal(self, response: JSONObject) -> str | None:
        """Why this round may not rerun, if it may not: the limit, or tool calls seen before."""
        if self.depth >= self.limit:
            return "limit"
        fingerprint = self.fingerprint(response)
        if fingerprint and fingerprint in self.seen:
            return "repeated_tool_calls"
        return None

    def fingerprint(self, response: JSONObject) -> tuple[tuple[str, bytes], ...]:
        """All tool calls of a response by name and canonical input; ids and order left out."""
        return tuple(sorted((call.name or "", call.input) for call in self.surface.tool_calls(response)))

    async def post_process(self, step: Rerun, answer: Answer) -> None:
        """Let the hook whose plan ran reshape the rerun's answer."""
        if step.hook.methods[POST_HOOK] is None:
            return
        result = await step.hook.call(POST_HOOK, response=answer.data, plan=step.plan, kwargs=step.kwargs)
        if result is None:
            return
        if result is not answer.data:
            if hasattr(result, "model_dump"):
                result = result.model_dump(mode="json")
            if not isinstance(result, Mapping):
                raise HookError(step.hook.name, POST_HOOK, f"returned {type(result).__name__}, not a response")
            result = wrap(dict(result))
        answer.data = result
        answer.changed = True

    def override(self, value: Any, hook: BoundHook, method: str) -> Any:
        if not (isinstance(value, Mapping) or hasattr(value, "model_dump")):
            raise HookError(hook.name, method, f"response_override is {type(value).__name__}, not a JSON object")
        return value

    def patched(self, patch: AgenticLoopRequestPatch, hook: BoundHook) -> dict[str, Any]:
        """The next request body: the patch over the current one, without a forced tool choice."""
        body = {**self.body, **patch.optional_params}
        if "tool_choice" not in patch.optional_params:
            body.pop("tool_choice", None)
        for name in ("model", "messages", "tools", "max_tokens"):
            value = getattr(patch, name)
            if value is not None:
                body[name] = value
        for name in [name for name in body if is_internal_field(name)]:
            del body[name]
        if patch.kwargs:
            self.patch_kwargs.update(patch.kwargs)
            if "max_agentic_loops" in patch.kwargs:
                try:
                    self.limit = loop_limit(patch.kwargs["max_agentic_loops"], "request_patch.kwargs")
                except ConfigurationError as error:
                    raise HookError(hook.name, self.surface.plan_method, str(error)) from None
        return body

    def optional_params(self) -> dict[str, Any]:
        return {key: value for key, value in self.body.items() if key not in ("model", "messages")}

    def hook_kwargs(self) -> dict[str, Any]:
        return {
            **self.patch_kwargs,
            "_agentic_loop_depth": self.depth,
            "max_agentic_loops": self.limit,
            "litellm_call_id": self.call_id,
            "custom_llm_provider": self.provider,
            "scope": self.scope,
        }

    def request_limit(self) -> int:
        """The limit for this request: `request.state.max_agentic_loops` when trusted code set it."""
        value = self.call_scope["state"].get("max_agentic_loops")
        if value is None:
            return self.limit
        try:
            return loop_limit(value, "request.state.max_agentic_loops")
        except ConfigurationError as error:
            raise LoopError(str(error)) from None

    async def call_app(self, body: bytes) -> Answer | None:
        """One internal call of the model app; None when its answer went straight to the client."""
        scope = {**self.call_scope, "headers": with_length(self.call_scope["headers"], len(body))}
        capture = ResponseCapture(self.send)
        try:
            await self.app(scope, replay(body, self.receive), capture.send)
        except Exception as error:
            if capture.forwarded:
                raise
            raise ModelAppError(f"the model app failed: {type(error).__name__}") from error
        if capture.forwarded:
            return None
        if capture.start is None or not capture.complete:
            raise ModelAppError("the model app ended a call without a complete response")
        return Answer(capture.start, capture.body)

    async def clean_up(self) -> None:
        """Every executed plan's cleanup hook, innermost first; a failing one is logged, not raised."""
        for step in reversed(self.executed):
            try:
                await step.hook.call(CLEANUP_HOOK, plan=step.plan, kwargs=step.kwargs)
            except HookError as error:
                self.logging_obj.logger.error("%s", error, exc_info=error.__cause__)

    def finish(self, reason: str, hook: BoundHook | None = None, detail: str | None = None) -> None:
        self.stop_reason = reason
        level = logging.WARNING if reason in ("limit", "repeated_tool_calls") else logging.DEBUG
        self.logging_obj.logger.log(
            level,
            "agentic loop ended: %s after %d reruns (hook %s%s)",
            reason,
            self.depth,
            hook.name if hook else "-",
            f", stop_reason {detail!r}" if detail else "",
        )

    def error_reply(self, error: LoopError) -> Reply:
        self.stop_reason = "hook_error" if isinstance(error, HookError) else "app_error"
        self.logging_obj.logger.error("agentic loop failed: %s", error, exc_info=error.__cause__ or error)
        body = self.surface.error_body(error.status, str(error), error.code)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        return Reply({"type": "http.response.start", "status": error.status, "headers": headers}, body)
