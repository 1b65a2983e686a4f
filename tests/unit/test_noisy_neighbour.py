"""The fair-queue model of bench.noisy_neighbour follows AWS's documented rules: a tenant over its share of the
in-flight messages is noisy while it has a backlog, quiet tenants' messages are delivered first meanwhile, and
nothing is dropped."""

from __future__ import annotations

from bench.noisy_neighbour import FairQueueModel, _Message, p95, simulate


def test_a_tenant_with_30_in_flight_and_over_a_tenth_of_them_is_noisy_while_it_has_a_backlog() -> None:
    model = FairQueueModel(fair=True)
    for _ in range(40):
        model.send(_Message("A", 0.0))
    model.send(_Message("B", 0.5))
    received = [model.receive(1.0) for _ in range(30)]
    assert all(message is not None and message.tenant == "A" for message in received)

    assert model.noisy(1.0) == {"A"}
    # B's message, though younger than A's waiting ten, goes first.
    first = model.receive(1.0)
    assert first is not None and first.tenant == "B"
    # With no quiet message waiting, the noisy tenant's are delivered as usual: none is dropped.
    rest = [model.receive(1.0) for _ in range(10)]
    assert all(message is not None and message.tenant == "A" for message in rest)
    assert model.receive(1.0) is None


def test_without_fairness_the_oldest_message_goes_first() -> None:
    model = FairQueueModel(fair=False)
    for _ in range(40):
        model.send(_Message("A", 0.0))
    model.send(_Message("B", 0.5))
    assert all((message := model.receive(1.0)) is not None and message.tenant == "A" for _ in range(40))


def test_behind_a_noisy_backlog_the_quiet_tenant_waits_about_as_on_an_empty_queue_only_when_fair() -> None:
    alone = p95(simulate(0, 50, fair=True))
    fair = p95(simulate(2000, 50, fair=True))
    unfair = p95(simulate(2000, 50, fair=False))

    assert fair <= 2 * alone
    assert unfair > 10 * alone
    assert len(simulate(2000, 50, fair=True)) == 50  # every one of B's jobs done
