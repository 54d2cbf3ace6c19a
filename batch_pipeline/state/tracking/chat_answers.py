"""The tracking store's record of a chat model's answers, by question and text (SQL only; the
ticket cascade, `tickets.cascade.chat`, decides what a question is and when to ask)."""

import time
from collections.abc import Iterable, Mapping

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from batch_pipeline.state.tracking.schema import chat_answers

CHUNK = 500  # keys per query


class ChatAnswerRecords:
    """Reads and writes the `chat_answers` table. Mixed into TrackingStore."""

    engine: Engine

    def chat_answers(self, question: str, text_keys: Iterable[str]) -> dict[str, str]:
        """The answers recorded to `question` for these texts, by text key."""
        keys = sorted(set(text_keys))
        found: dict[str, str] = {}
        with self.engine.connect() as conn:
            for start in range(0, len(keys), CHUNK):
                query = sa.select(chat_answers.c.text_key, chat_answers.c.answer).where(
                    chat_answers.c.question == question,
                    chat_answers.c.text_key.in_(keys[start : start + CHUNK]),
                )
                found.update((key, answer) for key, answer in conn.execute(query))
        return found

    def record_chat_answers(self, question: str, answers: Mapping[str, str]) -> None:
        """Keep these answers to `question` (by text key); one already kept stays as it is
        (a greedy answer to the same question is the same answer)."""
        if not answers:
            return
        for attempt in range(2):  # a concurrent run may record the same answer first
            try:
                with self.engine.begin() as conn:
                    known = self._known(conn, question, answers)
                    rows = [
                        {
                            "question": question,
                            "text_key": key,
                            "answer": answer[:256],
                            "answered_at": time.time(),
                        }
                        for key, answer in sorted(answers.items())
                        if key not in known
                    ]
                    for start in range(0, len(rows), CHUNK):
                        conn.execute(sa.insert(chat_answers), rows[start : start + CHUNK])
                return
            except sa.exc.IntegrityError:
                if attempt:
                    raise

    def _known(self, conn, question: str, answers: Mapping[str, str]) -> set[str]:  # noqa: ANN001
        keys = sorted(answers)
        known: set[str] = set()
        for start in range(0, len(keys), CHUNK):
            query = sa.select(chat_answers.c.text_key).where(
                chat_answers.c.question == question,
                chat_answers.c.text_key.in_(keys[start : start + CHUNK]),
            )
            known.update(row[0] for row in conn.execute(query))
        return known

    def drop_chat_answers(self, questions: Iterable[str]) -> int:
        """Forget the answers to these questions (no generation asks them any more); how
        many answers went."""
        dropped = sorted(set(questions))
        if not dropped:
            return 0
        query = sa.delete(chat_answers).where(chat_answers.c.question.in_(dropped))
        with self.engine.begin() as conn:
            return conn.execute(query).rowcount or 0
