"""Generation backends. Import a concrete one from its module (``evolm.backends.openai``,
``evolm.backends.vllm``, ``evolm.backends.hf``): they pull in heavy or optional packages, so this
package only exports the shared interface."""

from evolm.backends.base import Backend, Conversation, Message, SamplingParams, match_candidates

__all__ = ["Backend", "Conversation", "Message", "SamplingParams", "match_candidates"]
