"""The model: a job's life with every feature interleaved and faults on the runtime's own AWS calls, on the real
worker and moto (docs/key-life.md, "The promises").

A hypothesis state machine publishes jobs (plain, keyed, a tenant's, limited per customer, batch members with
callbacks, with follow-ups; to either of the queue's two priority lanes), delivers them through the event source
emulator, crashes an environment after a batch's side effects, throttles one of the runtime's own DynamoDB or SQS
calls (whichever comes next of a kind, after a success too), lets a run pass its time limit, cancels and undoes,
fixes and redrives. After every step it checks what must always hold; at the end it lets everything settle, with no
fault (and, long after, a heartbeat), and checks what must hold then:

- no run of a key starts, and no side effect of it is made, once its record said it completed;
- a key runs at most `max_attempts` times per life (a life ends with its dead letter);
- final states are final: a completed key stays completed; a cancelled one stays cancelled until undone;
- every dead letter carries its evidence;
- settled: nothing is lost (every published key completed, cancelled or dead-lettered), every batch's callbacks
  were published exactly once (`on_complete` once every member ended, `on_success` iff all succeeded), every
  completed run's follow-up ran, and what `jobctl job list` and `batch show` say agrees with the records.

`make test` runs it with a fixed budget (MODEL_EXAMPLES x MODEL_STEPS, derandomized); `make soak` runs it longer,
randomized, and prints what it ran. MODEL_TRACE=<idempotency key> (e.g. `work:1`) prints, after each step, what it
drew, that key's record and the dead letters seen so far: how a failure the model found is read step by step.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import time
from collections import Counter, defaultdict
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from moto import mock_aws

from sqs_jobs.batches import batch_item_id, callback_key, member_indices
from sqs_jobs.cli.batch_lookup import DEAD_STATE, SUCCEEDED_STATE, look_up_batch
from sqs_jobs.cli.chain_lookup import SUCCEEDED as CHAIN_SUCCEEDED
from sqs_jobs.cli.chain_lookup import WAITING as CHAIN_WAITING
from sqs_jobs.cli.chain_lookup import look_up_chain
from sqs_jobs.cli.job_cancel import CancelTarget, cancel_job, withdraw
from sqs_jobs.cli.job_life import jobs_in_flight
from sqs_jobs.envelope import Envelope
from sqs_jobs.flow_control import KeyConcurrency
from sqs_jobs.local.chaos import Chaos, ChaosSettings
from sqs_jobs.local.moto_limits import enforce_message_limits
from sqs_jobs.local.moto_locks import serialize_moto
from sqs_jobs.local.moto_senders import record_senders
from sqs_jobs.resources import Access, Table
from sqs_jobs.specs import HEARTBEAT_JOB, Catalog, JobSpec, QueueSpec
from sqs_jobs.worker.batch_members import OWED_AFTER_S
from sqs_jobs.worker.clients import ClientFactory, new_session
from sqs_jobs.worker.key_life import KeyRecord, KeyState, scoped_key, split_key
from sqs_jobs.worker.names import FINISHED_BY_HEARTBEAT, FLOW_SLOT_PREFIX, LifeState
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.provenance import ORIGINAL_MESSAGE
from sqs_jobs.worker.run_ledger import LISTING_CONDITION
from sqs_jobs.worker.runtime import Worker
from sqs_jobs.worker.settings import IDEMPOTENCY_KEY_PREFIX, idempotency_record_id
from sqs_jobs.worker.time_limit import current_run
from tests.functional.conftest import REGION, Harness
from tests.functional.model_support import dlq_messages, message_of, redrive_all
from tests.functional.sample_jobs import modelled
from tests.functional.test_generate_invoice import wait_for_abandoned_runs

pytestmark = [pytest.mark.timeout(900), pytest.mark.model]

HANDLER = "tests.functional.sample_jobs.modelled"
MAX_ATTEMPTS = 3
QUEUE = "life"
DEBOUNCE_S = 30
_JOB = {"time_limit_s": 1, "resources": ("effects",), "handler": HANDLER}
CATALOG = Catalog(
    queues=(
        QueueSpec(
            name=QUEUE,
            max_attempts=MAX_ATTEMPTS,
            function_timeout_s=8,
            # Half the jobs' time limit: a run that hangs is listed as running by the waiting thread before its cut,
            # and the listing meets the cut, the completion and a cancel.
            list_running_after_s=0.5,
            # Every delivery a span (docs/tracing.md): tracing meets every feature and fault here, and must change
            # no promise (with no tracer provider set, OpenTelemetry's own no-op spans).
            tracing=True,
            # Two priority lanes (docs/priorities.md): a publish goes to either, and every promise holds across them.
            priorities=("high", "normal"),
            jobs=(
                # A chain's steps are `work` jobs, and each may publish the next.
                JobSpec(name="work", publishes=("done", "work"), **_JOB),  # type: ignore[arg-type]
                JobSpec(
                    name="limited",
                    publishes=("done",),
                    concurrency=KeyConcurrency(limit=1, per="customer"),
                    **_JOB,  # type: ignore[arg-type]
                ),
                JobSpec(name="done", **_JOB),  # type: ignore[arg-type]
                # Longer than any example runs: every publish of a key is in its first window.
                JobSpec(name="unique", publishes=("done",), unique_for_s=3600, **_JOB),  # type: ignore[arg-type]
                JobSpec(name="debounced", publishes=("done",), debounce_s=DEBOUNCE_S, **_JOB),  # type: ignore[arg-type]
            ),
        ),
    ),
    resources=(
        Table(name="effects", description="what the model's runs did", partition_key="effect", access=Access.WRITE),
    ),
)
OPERATOR = "arn:aws:sts::123456789012:assumed-role/operator/model"
ENTITIES = ("1", "2", "3", "4")
MAX_PUBLISHES = 8
MAX_BATCHES = 2
MAX_CHAINS = 2
# Jobs whose publishes of one entity (and tenant) collapse: unique runs the first, debounce the last of a burst.
FLOW_JOBS = ("unique", "debounced")
TENANTS = (None, "acme", "globex")
KEYS = (None, "k")
# The runtime's own calls a fault may hit: each, when armed, refuses the next such call that is not a job's.
FAULTS = (
    ("dynamodb", "PutItem"),
    ("dynamodb", "UpdateItem"),
    ("dynamodb", "DeleteItem"),
    ("dynamodb", "GetItem"),
    ("sqs", "SendMessage"),
    ("sqs", "ChangeMessageVisibility"),
)
# The invocation a crash cuts short: the time limit, the settle margin and a second.
CRASHED_TIMEOUT_S = 4.0
THROTTLED = {"dynamodb": "ProvisionedThroughputExceededException", "sqs": "ThrottlingException"}

EXAMPLES = int(os.environ.get("MODEL_EXAMPLES", "12"))
STEPS = int(os.environ.get("MODEL_STEPS", "40"))
RANDOMIZED = os.environ.get("MODEL_RANDOM", "") == "1"
# What the runs did, across examples: the report `make soak` prints, and the floor the test holds itself to.
RAN: Counter[str] = Counter()

# Most runs succeed in the end, as in life: what follows a success is where faults matter most.
plans = st.builds(
    modelled.Plan,
    transient=st.sampled_from([0, 0, 0, 1, 2, MAX_ATTEMPTS + 1]),
    permanent=st.sampled_from([False, False, False, True]),
    slow=st.sampled_from([False] * 9 + [True]),
    progress=st.booleans(),
    cancel_mid_run=st.sampled_from([False] * 5 + [True]),
    follow_up=st.booleans(),
)


_FAULT = {
    "fault": st.none() | st.sampled_from(FAULTS),
    "skip": st.integers(0, 3),
    "rate": st.sampled_from([0.0, 0.0, 0.1, 0.3]),
    "seed": st.integers(0, 2**16),
}
_WHOSE = {
    "job": st.sampled_from(["work", "limited", *FLOW_JOBS]),
    "entity": st.sampled_from(ENTITIES),
    "tenant": st.sampled_from(TENANTS),
    "key": st.sampled_from(KEYS),
}
# Each thing that can happen: what it draws, and how often it happens against the others.
ACTIONS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "publish": {**_WHOSE, "customer": st.sampled_from(["c1", "c2"]), "lane": st.sampled_from([0, 1])},
    "publish_batch": {
        "members": st.lists(st.sampled_from(ENTITIES), min_size=1, max_size=3, unique=True),
        "on_success": st.booleans(),
    },
    "publish_chain": {
        "entities": st.lists(st.sampled_from(ENTITIES), min_size=2, max_size=3),
        "ends_done": st.booleans(),
    },
    "deliver": _FAULT,
    "crash_after_side_effects": {},
    "time_passes": {},
    "cancel": {**_WHOSE, "undo": st.booleans()},
    "fix": {"entity": st.sampled_from(ENTITIES)},
    "redrive": {},
}
WEIGHTS = {
    "publish": 3,
    "publish_batch": 1,
    "publish_chain": 1,
    "deliver": 8,
    "crash_after_side_effects": 1,
    "time_passes": 3,
    "cancel": 2,
    "fix": 1,
    "redrive": 1,
}


class Faults:
    """Throttles on the worker's own calls (never a job's: its thread has a current run): one-shot, on the next call
    of a kind after `skip` others, and, while a delivery lasts, each call at `rate` (drawn by a seeded generator)."""

    def __init__(self) -> None:
        self.armed: dict[tuple[str, str], int] = {}
        self.fired: Counter[str] = Counter()
        # The table items whose writes were refused: a key whose completion write was refused may run again.
        self.refused_items: set[str] = set()
        # How often each record's ENDING write (after its dead letter) was refused: both tries refused, a crash
        # before the acknowledgement may dead-letter its message again.
        self.refused_endings: Counter[str] = Counter()
        self.rate = 0.0
        self.rng = random.Random(0)
        self.listing_rng = random.Random(1)

    def arm(self, service: str, operation: str, skip: int) -> None:
        self.armed[(service, operation)] = skip

    def hook(self, service: str) -> Any:
        def refuse(params: dict[str, Any], model: Any, **_: Any) -> None:
            target = (service, model.name)
            if current_run() is not None:
                return
            if params.get("ConditionExpression") == LISTING_CONDITION:
                # A run's late listing is sent from a thread of its own, at a moment its run's timing decides: it
                # is refused at the delivery's rate by a generator of its own, and never takes an armed fault
                # meant for the writes that settle a key (their order stays the one drawn).
                if self.rate > 0.0 and self.listing_rng.random() < self.rate:
                    self.fired["dynamodb.listing"] += 1
                    raise ClientError(
                        {"Error": {"Code": THROTTLED[service], "Message": "injected by the model"}}, "UpdateItem"
                    )
                return
            if target not in self.armed:
                if self.rate <= 0.0 or self.rng.random() >= self.rate:
                    return
            elif self.armed[target] > 0:
                self.armed[target] -= 1
                return
            else:
                del self.armed[target]
            self.fired[f"{service}.{model.name}"] += 1
            item = params.get("Key", params.get("Item", {})).get("id", {}).get("S")
            if item is not None:
                self.refused_items.add(item)
                if "#ending_message" in params.get("UpdateExpression", ""):
                    self.refused_endings[item] += 1
            raise ClientError({"Error": {"Code": THROTTLED[service], "Message": "injected by the model"}}, model.name)

        return refuse


class JobLives(RuleBasedStateMachine):
    """One account, one queue, one worker environment at a time; see the module's docstring."""

    def __init__(self) -> None:
        super().__init__()
        record_senders()
        serialize_moto()
        enforce_message_limits()
        self._aws = mock_aws()
        self._aws.start()
        modelled.reset()
        clients = ClientFactory(session=new_session(region_name=REGION))
        self.harness = Harness.provisioned(clients, CATALOG)
        self.faults = Faults()
        worker_clients = self.harness.worker_clients(QUEUE)
        for service in ("dynamodb", "sqs"):
            worker_clients.register(f"before-parameter-build.{service}", self.faults.hook(service))
        self.worker = self._new_worker()
        self.table = self.harness.deployment.idempotency_table
        self.local = self.harness.deployment.queues[QUEUE]
        # What the model published: each key, and the batches with their callbacks.
        self.keys: set[str] = set()
        self.published = 0
        self.batches: dict[str, bool] = {}  # batch ID -> has on_success
        self.chains: dict[str, list[str]] = {}  # chain ID -> its steps' keys
        # Unique and debounced publishes by what collapses them (job, entity, tenant): (serial, idempotency key
        # if the publisher named one).
        self.flows: defaultdict[tuple[str, str, str | None], list[tuple[str, str | None]]] = defaultdict(list)
        # How far ahead of the real clock the worker's is: windows end as time passes.
        self.ahead_s = 0.0
        self.receipts: list[tuple[str, str]] = []  # (queue URL, receipt handle)
        # What it has seen: the STARTS index and effect count when a key was first seen completed; cancelled keys;
        # dead letters per key (their message IDs), ever.
        self.completed: dict[str, tuple[int, int]] = {}
        self.cancelled: set[str] = set()
        # Every key seen cancelled: its copies were acknowledged unrun, so an undo alone runs nothing of it.
        self.ever_cancelled: set[str] = set()
        self.dead: defaultdict[str, set[str]] = defaultdict(set)
        # Per published message: its dead letters (their IDs), and how often a redrive sent it back.
        self.dead_letters_of: defaultdict[str, set[str]] = defaultdict(set)
        self.redriven: Counter[str] = Counter()
        # Messages whose acknowledgement a crash lost, and the messages delivered of each key.
        self.crashed_messages: set[str] = set()
        # The SQS messages (each delivery's identity: a redrive of a message is another one, as a new publish is; a
        # fresh copy the runtime sent on a last receive is its original) whose last delivery was left on the queue
        # (not acknowledged); the dead-lettered ones (a new dead letter is the delivery's of its message since the
        # last check); and per published message, those left on the queue after their own dead letter: a hand-back
        # after it (the count or the record's clearing refused), as a crash leaves it.
        self.left_on_queue: set[str] = set()
        self.dead_identities: set[str] = set()
        self.delivered_since_check: defaultdict[str, set[str]] = defaultdict(set)
        self.unacknowledged_dead: defaultdict[str, set[str]] = defaultdict(set)
        # The SQS messages delivered of each key.
        self.delivered_of_key: defaultdict[str, set[str]] = defaultdict(set)
        modelled.CANCEL.append(self._cancel_mid_run)
        if os.environ.get("MODEL_TRACE"):
            print("TRACE start", flush=True)

    def _new_worker(self) -> Worker:
        return Worker(
            settings=self.harness.deployment.worker_settings(QUEUE),
            clients=self.harness.worker_clients(QUEUE),
            observability=Observability.create(output=self.harness.output),
            clock=lambda: time.time() + self.ahead_s,
        )

    def teardown(self) -> None:
        try:
            self._settle()
        finally:
            wait_for_abandoned_runs()
            self._aws.stop()

    # --- the steps ------------------------------------------------------------------------------------------------

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        """One thing that happens, drawn by its weight (deliveries are most of life; a few publishes an example, so
        its steps go to what becomes of them), with what it needs."""
        action = data.draw(st.sampled_from(self._actions()), label="action")
        draw = {name: data.draw(strategy, label=name) for name, strategy in ACTIONS[action].items()}
        getattr(self, action)(**draw)
        if os.environ.get("MODEL_TRACE"):
            self._trace(action, draw)

    def _trace(self, action: str, draw: dict[str, Any]) -> None:
        """MODEL_TRACE: the step, and the traced key's record after it (its large attributes left out)."""
        traced = os.environ["MODEL_TRACE"]
        item = (
            self.harness.clients("dynamodb")
            .get_item(TableName=self.table, Key={"id": {"S": idempotency_record_id(traced)}})
            .get("Item", {})
        )
        left_out = ("data", "ending_body", "validation")
        shown = {name: next(iter(value.values())) for name, value in item.items() if name not in left_out}
        dead = {message: len(ids) for message, ids in self.dead_letters_of.items()}
        print(f"TRACE {action} {draw} -> {shown} dead={dead} redriven={dict(self.redriven)}", flush=True)

    def _actions(self) -> list[str]:
        weighted = [name for name, weight in WEIGHTS.items() for _ in range(weight)]
        if self.published >= MAX_PUBLISHES:
            weighted = [name for name in weighted if name != "publish"]
        if len(self.batches) >= MAX_BATCHES:
            weighted = [name for name in weighted if name != "publish_batch"]
        if len(self.chains) >= MAX_CHAINS:
            weighted = [name for name in weighted if name != "publish_chain"]
        return weighted

    # --- publishing ---------------------------------------------------------------------------------------------

    @initialize(plan_list=st.lists(plans, min_size=len(ENTITIES), max_size=len(ENTITIES)))
    def plan(self, plan_list: list[modelled.Plan]) -> None:
        modelled.PLANS.update(dict(zip(ENTITIES, plan_list, strict=True)))

    def publish(self, job: str, entity: str, tenant: str | None, key: str | None, customer: str, lane: int) -> None:
        # `m` tells this message apart from every other: a message is dead-lettered once per life.
        body: dict[str, Any] = {"job": job, "id": entity, "customer": customer, "m": self.published}
        if job == "debounced":
            time.sleep(0.002)  # SQS stamps sends in milliseconds: the last publish is the latest sent
        if tenant is not None:
            body["tenant"] = tenant
        if key is not None:
            body["key"] = key
        url = self.local.sources[lane].url
        self.harness.clients("sqs").send_message(QueueUrl=url, MessageBody=json.dumps(body))
        if job in FLOW_JOBS:
            self.flows[(job, entity, tenant)].append((str(self.published), key))
        else:
            self.keys.add(scoped_key(job, key or entity, tenant))
        self.published += 1
        RAN[f"publish {job}"] += 1

    def publish_batch(self, members: list[str], on_success: bool) -> None:
        number = len(self.batches)
        batch_id = self.harness.stack_publisher().batch(
            [("work", entity) for entity in members],
            on_complete=("done", f"batch-{number}"),
            on_success=("done", f"batch-{number}") if on_success else None,
        )
        self.batches[batch_id] = on_success
        self.keys.update(scoped_key("work", entity, None) for entity in members)
        RAN["batch"] += 1

    def publish_chain(self, entities: list[str], ends_done: bool) -> None:
        """A chain of `work` steps (each entity's plan), perhaps ending in `done`; each step's key is its own."""
        number = len(self.chains)
        steps = [Envelope(job="work", id=entity, key=f"c{number}s{index}") for index, entity in enumerate(entities)]
        if ends_done:
            steps.append(Envelope(job="done", id=f"chain-{number}", key=f"c{number}s{len(steps)}"))
        chain_id = self.harness.stack_publisher().chain(steps)
        self.chains[chain_id] = [scoped_key(step.job, step.key or step.id, None) for step in steps]
        RAN["chain"] += 1

    # --- delivering -----------------------------------------------------------------------------------------------

    def deliver(self, fault: tuple[str, str] | None, skip: int, rate: float, seed: int) -> None:
        """One poll of the queue by the warm environment, one of the runtime's own calls throttled if `fault`
        names one (the `skip`-th such call after this starts: after a success too), and each of them at `rate`
        while it lasts."""
        if fault is not None:
            self.faults.arm(*fault, skip)
        self.faults.rate, self.faults.rng = rate, random.Random(seed)
        try:
            invocation = self.harness.deliver(QUEUE, worker=self.worker)
        finally:
            self.faults.rate = 0.0
        if invocation is not None:
            self._keep_receipts(invocation)
            RAN["deliver"] += 1

    def crash_after_side_effects(self) -> None:
        """A new environment takes a batch, runs it, and dies before its answer: nothing is acknowledged."""
        mapping = self.harness.mapping(QUEUE, chaos=Chaos(ChaosSettings(crash=1.0)))
        # Its runs hold their keys until its invocation's deadline: a short one, so the model waits little.
        invocation = mapping.poll_once(self._new_worker().handle, timeout_s=CRASHED_TIMEOUT_S)
        if invocation is not None:
            self._keep_receipts(invocation)
            self.crashed_messages.update(message_of(json.loads(r["body"])) for r in invocation.event["Records"])
            RAN["crash"] += 1

    def time_passes(self) -> None:
        """Time passes until nothing waits any more: every message handed back or left by a crash is due again,
        and the holds of runs that are over (a crashed environment's key and slot) have ended, as their deadlines
        would have, and so have the windows of debounced copies sent before. No run is in flight between steps,
        once the threads of runs cut at their limit have ended."""
        wait_for_abandoned_runs()
        self.ahead_s += DEBOUNCE_S + 1
        sqs = self.harness.clients("sqs")
        for url, receipt in self.receipts:
            with contextlib.suppress(ClientError):  # deleted since, or received again
                sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=receipt, VisibilityTimeout=0)
        self.receipts.clear()
        dynamodb, now = self.harness.clients("dynamodb"), time.time()
        for page in dynamodb.get_paginator("scan").paginate(TableName=self.table):
            for item in page["Items"]:
                if item["id"]["S"].startswith(FLOW_SLOT_PREFIX) and "until" in item:
                    ended = {"#at": "until"}, {":past": {"N": f"{now - 1:.3f}"}}
                elif item.get("status", {}).get("S") == "INPROGRESS" and "in_progress_expiration" in item:
                    ended = {"#at": "in_progress_expiration"}, {":past": {"N": str(int(now * 1000) - 1)}}
                else:
                    continue
                dynamodb.update_item(
                    TableName=self.table,
                    Key={"id": item["id"]},
                    UpdateExpression="SET #at = :past",
                    ExpressionAttributeNames=ended[0],
                    ExpressionAttributeValues=ended[1],
                )
        RAN["time"] += 1

    # --- the operator ---------------------------------------------------------------------------------------------

    def _target(self, job: str, entity: str, tenant: str | None, key: str | None) -> CancelTarget:
        return CancelTarget(
            queue=QUEUE,
            job=job,
            job_id=entity,
            key=scoped_key(job, key or entity, tenant),
            expiry_s=CATALOG.queue(QUEUE).idempotency_expiry_s,
            tenant=tenant or "",
        )

    def _cancel_mid_run(self, job: str, entity: str, tenant: str | None, key: str | None) -> None:
        cancel_job(self.harness.clients("dynamodb"), self.table, self._target(job, entity, tenant, key), OPERATOR)
        RAN["cancel mid-run"] += 1

    def cancel(self, job: str, entity: str, tenant: str | None, key: str | None, undo: bool) -> None:
        target = self._target(job, entity, tenant, key)
        dynamodb = self.harness.clients("dynamodb")
        if undo:
            withdraw(dynamodb, self.table, target)
            self.cancelled.discard(target.key)
            RAN["undo"] += 1
        else:
            cancel_job(dynamodb, self.table, target, OPERATOR)
            RAN["cancel"] += 1

    def fix(self, entity: str) -> None:
        modelled.FIXED.add(entity)
        RAN["fixed"] += 1

    def redrive(self) -> None:
        RAN["redriven"] += redrive_all(self.harness, self.local, self.redriven)

    # --- what must always hold --------------------------------------------------------------------------------------

    @invariant()
    def promises_hold(self) -> None:
        records = self._records()
        starts = list(modelled.STARTS)
        effects = self._effects()
        self._see_dead_letters()
        now = time.time()
        for record_id, record in records.items():
            key = record.job_key or record_id
            state = record.state(now)
            if key in self.completed:
                at_start, at_effects = self.completed[key]
                assert state is KeyState.COMPLETED, f"{key} completed, then {state}: a final state was overwritten"
                later = [start for start in starts if start[1] == key and start[0] > at_start]
                assert not later, f"{key} ran again after its success was recorded: {later}"
                assert effects[key] == at_effects, f"{key}'s side effect repeated after its success was recorded"
            elif state is KeyState.COMPLETED and record.job_key is not None:
                self.completed[key] = (max((s[0] for s in starts), default=-1), effects[key])
            if key in self.cancelled:
                assert state is KeyState.CANCELLED, f"{key} was cancelled and not undone, yet is {state}"
            elif state is KeyState.CANCELLED and record.job_key is not None:
                self.cancelled.add(key)
                self.ever_cancelled.add(key)
        runs = Counter(key for _, key, _ in starts)
        for key, count in runs.items():
            lives = 1 + len(self.dead[key])
            assert count <= MAX_ATTEMPTS * lives, f"{key} ran {count} times in {lives} life/lives"
        # A run that returned is a success: another one of its key is a success repeated, which only a refused
        # completion write (both its tries) may excuse.
        for key, count in Counter(modelled.RETURNED).items():
            assert count == 1 or idempotency_record_id(key) in self.faults.refused_items, (
                f"{key} succeeded {count} times, its completion never refused"
            )
        started = set(runs)
        by_key = {record.job_key: record for record in records.values() if record.job_key}
        for chain_id, keys in self.chains.items():
            for before, key in itertools.pairwise(keys):
                previous = by_key.get(before)
                succeeded = previous is not None and previous.state(now) is KeyState.COMPLETED
                assert key not in started or succeeded or before in modelled.RETURNED, (
                    f"chain {chain_id}: {key} ran before {before} succeeded"
                )
        for (job, entity, tenant), published in self.flows.items():
            if job == "unique":
                ran = {key for serial, key in self._runs_of(published)}
                assert len(ran) <= 1, f"unique {job}:{entity} ({tenant}) ran under {sorted(ran)}: one window, one run"

    # --- settling -----------------------------------------------------------------------------------------------

    def _settle(self) -> None:
        """No fault any more: everything due runs until the queue is empty; then what must hold at rest."""
        RAN.update({f"fault {name}": count for name, count in self.faults.fired.items()})
        self.faults.armed.clear()
        wait_for_abandoned_runs()
        self._until_empty()
        # Long after, a heartbeat publishes what a batch's last count left unpublished (BatchMembers.watch_open).
        self.ahead_s += OWED_AFTER_S
        self.harness.send(json.dumps({"job": HEARTBEAT_JOB, "id": "settled"}), queue=QUEUE)
        self._until_empty()
        finished = [line for line in self.harness.log_lines() if line.get("message") == FINISHED_BY_HEARTBEAT]
        RAN["callbacks the heartbeat finished"] += len(finished)
        # Only a fault on the runtime's own calls leaves a batch's callback to the heartbeat: the count path itself
        # must never need it.
        assert not finished or self.faults.fired.total() > 0, f"the heartbeat finished {finished} with no fault"
        wait_for_abandoned_runs()
        self.promises_hold()
        records = self._records()
        by_key = {record.job_key: record for record in records.values() if record.job_key}
        now = time.time()
        returned = set(modelled.RETURNED)
        for key in self.keys:
            record = by_key.get(key)
            state = record.state(now) if record is not None else KeyState.NEW
            # A success whose completion write was refused twice is acknowledged all the same: it ran. A key once
            # cancelled had its copies acknowledged unrun: undone, it runs when published again (docs/jobctl.md).
            accounted = key in returned or key in self.ever_cancelled or self.dead[key]
            assert state in (KeyState.COMPLETED, KeyState.CANCELLED) or accounted, (
                f"{key} was published and is {state}, with no dead letter: lost"
            )
        self._check_batches()
        self._check_chains(records)
        self._check_flows(records)
        self._check_follow_ups()
        self._check_lists(records)
        RAN["examples"] += 1

    def _until_empty(self) -> None:
        for _ in range(60):
            self.time_passes()
            invocation = self.harness.deliver(QUEUE, worker=self.worker)
            if invocation is not None:
                self._keep_receipts(invocation)
            elif self.harness.queue_counts(QUEUE) == (0, 0):
                return
        raise AssertionError(f"the queue never emptied: {self.harness.queue_counts(QUEUE)} left")

    def _check_batches(self) -> None:
        dynamodb = self.harness.clients("dynamodb")
        returned = set(modelled.RETURNED)
        for number, (batch_id, has_success) in enumerate(self.batches.items()):
            item = dynamodb.get_item(TableName=self.table, Key={"id": {"S": batch_item_id(batch_id)}})["Item"]
            size = int(item["size"]["N"])
            succeeded, dead = member_indices(item, "succeeded"), member_indices(item, "dead")
            complete = scoped_key("done", callback_key(batch_id, "complete"), None) in returned
            success = scoped_key("done", callback_key(batch_id, "success"), None) in returned
            ended = len(succeeded) + len(dead) >= size
            assert complete == ended, f"batch {number}: {len(succeeded)}+{len(dead)} of {size} ended, on_complete ran"
            if has_success:
                assert success == (len(succeeded) >= size), (
                    f"batch {number}: {len(succeeded)} of {size} succeeded, on_success ran: {success}"
                )
            shown = look_up_batch(dynamodb, self.table, batch_id)
            assert (shown.count(SUCCEEDED_STATE), shown.count(DEAD_STATE)) == (len(succeeded), len(dead)), (
                "batch show disagrees"
            )
            RAN["batch settled"] += 1

    def _ended(self, key: str, by_key: dict[str, KeyRecord], now: float) -> bool:
        """Whether a key's life ended: completed or cancelled as its record says, dead-lettered, or it returned."""
        record = by_key.get(key)
        final = record is not None and record.state(now) in (KeyState.COMPLETED, KeyState.CANCELLED)
        return final or key in modelled.RETURNED or key in self.ever_cancelled or bool(self.dead[key])

    def _check_chains(self, records: dict[str, KeyRecord]) -> None:
        """Each step runs once the step before it succeeded, and only then; `chain show` agrees with the records."""
        dynamodb, now = self.harness.clients("dynamodb"), time.time()
        by_key = {record.job_key: record for record in records.values() if record.job_key}
        started = {key for _, key, _ in modelled.STARTS}
        for number, (chain_id, keys) in enumerate(self.chains.items()):
            view = look_up_chain(dynamodb, self.table, chain_id, CATALOG)
            states = [step.state for step in view.steps]
            for index, key in enumerate(keys):
                record = by_key.get(key)
                if record is not None and record.state(now) is KeyState.COMPLETED:
                    assert states[index] == CHAIN_SUCCEEDED, f"chain {number}: {key} completed, shown {states}"
                if index == 0 or states[index - 1] == CHAIN_SUCCEEDED:
                    assert states[index] != CHAIN_WAITING, f"chain {number}: step {index + 1} never published {states}"
                    assert self._ended(key, by_key, now), f"chain {number}: {key} published and lost ({states})"
                else:
                    assert states[index] == CHAIN_WAITING and key not in started, (
                        f"chain {number}: step {index + 1} published though the one before it did not succeed {states}"
                    )
            RAN["chain settled"] += 1

    def _check_flows(self, records: dict[str, KeyRecord]) -> None:
        """Of a unique key's publishes, one ran to its end; of a debounced key's, the latest did."""
        now = time.time()
        by_key = {record.job_key: record for record in records.values() if record.job_key}
        for (job, entity, tenant), published in self.flows.items():
            named = {scoped_key(job, key or entity, tenant) for _, key in published}
            ran = {key for _, key in self._runs_of(published)}
            assert any(self._ended(key, by_key, now) for key in named | ran), (
                f"{job}:{entity} ({tenant}) was published {len(published)} times and nothing of it ended: lost"
            )
            if job == "debounced":
                latest, key = published[-1]
                ran_latest = any(self._ended(run, by_key, now) for _, run in self._runs_of([(latest, key)]))
                # A key the publisher named may have completed in an earlier burst: the latest is its duplicate.
                duplicate = key is not None and self._ended(scoped_key(job, key, tenant), by_key, now)
                assert ran_latest or duplicate or self.dead_letters_of[latest], (
                    f"the latest publish of debounced {entity} ({tenant}) never ran to its end"
                )
            RAN["flow settled"] += 1

    def _runs_of(self, published: list[tuple[str, str | None]]) -> list[tuple[str, str]]:
        """(serial, key run under) of every run started by one of these publishes."""
        serials = {serial for serial, _ in published}
        return [(serial, key) for serial, key in modelled.MESSAGES if serial in serials]

    def _check_follow_ups(self) -> None:
        returned = set(modelled.RETURNED)
        for key in returned:
            job, _, entity = split_key(key)
            if job != modelled.FOLLOW_UP_JOB and modelled.PLANS.get(entity, modelled.Plan()).follow_up:
                assert scoped_key("done", f"after-{entity}", None) in returned, f"{key}'s follow-up is lost"
                RAN["follow-up checked"] += 1

    def _check_lists(self, records: dict[str, KeyRecord]) -> None:
        listed = jobs_in_flight(self.harness.clients("dynamodb"), self.table, [QUEUE]).jobs
        shown = {entry.key: entry.state for entry in listed}
        now = time.time()
        for record in records.values():
            # A key that is done is out of the index: a run's late listing never brings it back.
            if record.state(time.time()) is KeyState.COMPLETED:
                assert record.life is None, f"{record.job_key} is completed but listed ({record.life})"
            if record.life is None or record.job_key is None:
                continue
            assert record.job_key in shown, f"{record.job_key} is in flight ({record.life}) but not listed"
            state = record.state(now)
            expected = LifeState.CANCELLED if state is KeyState.CANCELLED else None
            if expected is not None:
                assert shown[record.job_key] is expected, f"{record.job_key} is {state}, listed {shown[record.job_key]}"

    # --- reading what is there ------------------------------------------------------------------------------------

    def _keep_receipts(self, invocation: Any) -> None:
        for record in invocation.event["Records"]:
            body = json.loads(record["body"])
            if "job" in body and "id" in body:
                key = scoped_key(body["job"], body.get("key") or body["id"], body.get("tenant"))
                sent, identity = message_of(body), _identity_of(record)
                self.delivered_of_key[key].add(identity)
                self.delivered_since_check[sent].add(identity)
                if record["messageId"] in invocation.deleted:
                    self.left_on_queue.discard(identity)
                else:
                    self.left_on_queue.add(identity)
                    if identity in self.dead_identities:
                        self.unacknowledged_dead[sent].add(identity)
        urls = {source.arn: source.url for source in self.local.sources}
        self.receipts.extend(
            (urls[record["eventSourceARN"]], record["receiptHandle"])
            for record in invocation.event["Records"]
            if record["messageId"] not in invocation.deleted
        )

    def _records(self) -> dict[str, KeyRecord]:
        found: dict[str, KeyRecord] = {}
        for page in self.harness.clients("dynamodb").get_paginator("scan").paginate(TableName=self.table):
            for item in page["Items"]:
                record_id = item["id"]["S"]
                if record_id.startswith(f"{IDEMPOTENCY_KEY_PREFIX}#"):
                    found[record_id] = KeyRecord.from_item(record_id, item)
        return found

    def _effects(self) -> Counter[str]:
        table = self.harness.deployment.resources["effects"]
        counted: Counter[str] = Counter()
        for page in self.harness.clients("dynamodb").get_paginator("scan").paginate(TableName=table):
            counted.update(item["key"]["S"] for item in page["Items"])
        return counted

    def _see_dead_letters(self) -> None:
        """Every dead letter now in the DLQ, read without taking it (moto's own state), checked for evidence."""
        for message in dlq_messages(self.local):
            body = json.loads(message.body)
            key = scoped_key(body["job"], body.get("key") or body["id"], body.get("tenant"))
            attributes = {name: value.get("StringValue") for name, value in message.message_attributes.items()}
            assert attributes.get("jobs.error_type") and attributes.get("jobs.failure"), (
                f"a dead letter of {key} without its evidence: {sorted(attributes)}"
            )
            assert 1 <= int(attributes["jobs.attempts"]) <= MAX_ATTEMPTS, f"{key}: attempts {attributes}"
            self.dead[key].add(message.id)
            sent = message_of(body)
            if message.id not in self.dead_letters_of[sent]:
                dead_now = self.delivered_since_check[sent]
                self.dead_identities.update(dead_now)
                # dead-lettered by the delivery that left it on the queue
                self.unacknowledged_dead[sent].update(dead_now & self.left_on_queue)
            self.dead_letters_of[sent].add(message.id)
            unwritten_ending = self.faults.refused_endings[idempotency_record_id(key)] >= 2
            # What the key's record can't answer: a message whose acknowledgement was lost twice, or whose
            # redelivery another message of its key (a redrive of it too) overtook (docs/key-life.md, "The
            # promises"): lost to a crash, or handed back after its dead letter (its batch count or the record's
            # clearing refused).
            left = self.unacknowledged_dead[sent]
            others = self.delivered_of_key[key] - left
            overtaken = sent in self.crashed_messages or (bool(left) and bool(others))
            excused = unwritten_ending or overtaken
            assert len(self.dead_letters_of[sent]) <= 1 + self.redriven[sent] or excused, (
                f"message {sent} of {key} dead-lettered {len(self.dead_letters_of[sent])} times, redriven "
                f"{self.redriven[sent]}: a second dead letter of one life"
            )
        self.delivered_since_check.clear()


def _identity_of(record: dict[str, Any]) -> str:
    """Which SQS message a delivery is, as the runtime tells them apart (`Delivery.message_identity`): its message
    ID, or on a fresh copy the runtime sent, its original's (`jobs.original_message`)."""
    original = record.get("messageAttributes", {}).get(ORIGINAL_MESSAGE, {}).get("stringValue")
    return str(original or record["messageId"])


def test_every_promise_holds_where_the_features_meet(monkeypatch: pytest.MonkeyPatch) -> None:
    # A record whose key another run holds is handed back after 0.2 s, not 2 (the model has no twin to wait for).
    monkeypatch.setattr("sqs_jobs.worker.execution.IN_PROGRESS_PATIENCE_S", 0.2)
    budget = settings(
        max_examples=EXAMPLES,
        stateful_step_count=STEPS,
        deadline=None,
        derandomize=not RANDOMIZED,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    RAN.clear()
    run_state_machine_as_test(JobLives, settings=budget)
    steps = sum(
        count
        for name, count in RAN.items()
        if name
        not in (
            "examples",
            "batch settled",
            "chain settled",
            "flow settled",
            "follow-up checked",
            "callbacks the heartbeat finished",
        )
        and not name.startswith("fault ")
    )
    print(f"model: {RAN['examples']} examples, {steps} steps: {dict(sorted(RAN.items()))}")
    # The budget was spent on the job's life, not on examples that did nothing.
    assert RAN["examples"] >= EXAMPLES // 2 and RAN["deliver"] >= EXAMPLES
