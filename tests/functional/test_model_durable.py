"""The durable model: a durable job's life with faults on the runtime's own AWS calls, on the real worker, moto and
AWS's durable execution testing SDK (docs/key-life.md, "The model"; docs/workflows.md, "How a durable execution
ends").

A hypothesis state machine plans what each entity's executions do (sample_jobs/durable_modelled.py: succeed after
transient step failures, fail permanently, be non-deterministic outside steps, call a step inside a step, run a
step's attempt past its time limit and report late, hang outside steps, name a follow-up), then publishes the
durable job (duplicates of a key included) and batches of it with a completion callback, delivers through the event
source emulator, crashes an environment after its starts, throttles one of the runtime's own DynamoDB or SQS calls
(the worker's or the durable function's, whichever comes next of a kind, after a success too, or each at a rate),
stops hung executions or times them out, cancels durable jobs as jobctl does (and undoes it), sends the event an
awaiting execution waits for (early, late or twice too: refused), sends the heartbeat whose sweep ends what ended
without its end, cancels and undoes follow-ups, fixes entities and redrives. Executions run in the background; each
step waits until they are at rest (ended, or hung). After every step it checks what must always hold; at the end it
lets everything settle, with no fault, and checks what must hold then:

- a durable record's end is final: SUCCEEDED stays SUCCEEDED at its generation, and a generation never goes back;
- every dead letter carries true evidence (its job, attempts within max_attempts, an error type the plan, a stop
  or a timeout explains), and a key has one per life: its generation counts its dead letters (one more while its
  end is being written), and a published message is dead-lettered at most once plus once per redrive;
- no step attempt of a key starts, and no side effect of it is made (but by an attempt cut before it), once its
  record said SUCCEEDED; a follow-up or a batch callback runs at most once;
- an event the sender was told it sent reached its wait: the job's code after the wait got its payload, and no wait
  it completed timed out;
- settled: nothing is lost (every published key SUCCEEDED, or FAILED with as many dead letters as generations; no
  record STARTING or RUNNING, no execution running nor listed in flight), every success's follow-up ran once and no
  failure's did, and every batch's members were all counted and its callback ran once.

`make test` runs it with a fixed budget (MODEL_EXAMPLES x MODEL_STEPS, derandomized); `make soak` runs it longer,
randomized, and prints what it ran.
"""

from __future__ import annotations

import contextlib
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
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from moto import mock_aws

from sqs_jobs.batches import batch_item_id, callback_key, member_indices
from sqs_jobs.cli.job_cancel import CancelTarget, cancel_job, withdraw
from sqs_jobs.cli.job_life import jobs_in_flight
from sqs_jobs.durable import Durable, execution_name
from sqs_jobs.durable.record import FAILED, RUNNING, STARTING, SUCCEEDED, DurableRecords
from sqs_jobs.durable.runtime import DurableRuntime, DurableSettings
from sqs_jobs.events import EventNotAwaitedError, JobEvents
from sqs_jobs.local.chaos import Chaos, ChaosSettings
from sqs_jobs.local.durable import LocalDurableFunctions
from sqs_jobs.local.heartbeat import heartbeat_body
from sqs_jobs.local.moto_limits import enforce_message_limits
from sqs_jobs.local.moto_locks import serialize_moto
from sqs_jobs.local.moto_senders import record_senders
from sqs_jobs.specs import Catalog, JobSpec, QueueSpec
from sqs_jobs.stack_names import durable_function_name
from sqs_jobs.worker.clients import ClientFactory, new_session
from sqs_jobs.worker.observability import Observability
from sqs_jobs.worker.runtime import Worker
from sqs_jobs.worker.settings import idempotency_record_id
from sqs_jobs.worker.time_limit import current_run
from tests.functional.conftest import REGION, Harness
from tests.functional.model_support import dlq_messages, message_of, redrive_all
from tests.functional.sample_jobs import durable_modelled as modelled
from tests.functional.test_generate_invoice import wait_for_abandoned_runs

pytestmark = [pytest.mark.timeout(900), pytest.mark.model]

HANDLER = "tests.functional.sample_jobs.durable_modelled"
JOB, FOLLOW_UP = modelled.DURABLE_JOB, modelled.FOLLOW_UP_JOB
MAX_ATTEMPTS = 3
QUEUE = "dlife"
CATALOG = Catalog(
    queues=(
        QueueSpec(
            name=QUEUE,
            max_attempts=MAX_ATTEMPTS,
            backoff_base_s=1,
            function_timeout_s=30,
            jobs=(
                JobSpec(
                    name=JOB,
                    handler=HANDLER,
                    durable=Durable(
                        execution_timeout_s=600, retention_days=1, function_timeout_s=60, step_time_limit_s=1
                    ),
                    publishes=(FOLLOW_UP,),
                ),
                JobSpec(name=FOLLOW_UP, handler=HANDLER, time_limit_s=1),
            ),
        ),
    ),
)
OPERATOR = "arn:aws:sts::123456789012:assumed-role/operator/model"
ENTITIES = ("1", "2", "3", "4")
MAX_PUBLISHES = 8
MAX_BATCHES = 2
# The runtime's own calls a fault may hit, the worker's or the durable function's: each, when armed, refuses the next
# such call of that side.
FAULTS = (
    ("dynamodb", "PutItem"),
    ("dynamodb", "UpdateItem"),
    ("dynamodb", "GetItem"),
    ("dynamodb", "DeleteItem"),
    ("sqs", "SendMessage"),
    ("sqs", "SendMessageBatch"),
)
SIDES = ("worker", "durable")
THROTTLED = {"dynamodb": "ProvisionedThroughputExceededException", "sqs": "ThrottlingException"}
# How long the executions may take to come to rest after a step (a cut attempt's thread runs on for SLOW_S).
REST_S = 30.0
CRASHED_TIMEOUT_S = 4.0

EXAMPLES = int(os.environ.get("MODEL_EXAMPLES", "16"))
STEPS = int(os.environ.get("MODEL_STEPS", "30"))
RANDOMIZED = os.environ.get("MODEL_RANDOM", "") == "1"
RAN: Counter[str] = Counter()

# Most executions succeed in the end, as in life; each way of failing is drawn now and then.
plans = st.builds(
    modelled.Plan,
    transient=st.sampled_from([0, 0, 0, 1, 2, MAX_ATTEMPTS]),
    permanent=st.sampled_from([False] * 5 + [True]),
    nondeterministic=st.sampled_from([False] * 5 + [True]),
    nested=st.sampled_from([False] * 7 + [True]),
    slow=st.sampled_from([False] * 3 + [True]),
    hang=st.sampled_from([False] * 4 + [True]),
    follow_up=st.booleans(),
    awaits=st.sampled_from([False] * 2 + [True]),
)

# What follows a success is where the durable runtime's promises break (a follow-up's publish, the record's end):
# its publishes and record writes are drawn most often, so the budget of `make test` reaches them.
WEIGHTED_FAULTS = (*FAULTS, *[("sqs", "SendMessageBatch")] * 3, *[("dynamodb", "UpdateItem")] * 2)
_FAULT = {
    "side": st.sampled_from(SIDES),
    "fault": st.none() | st.sampled_from(WEIGHTED_FAULTS),
    "skip": st.integers(0, 3),
    "rate": st.sampled_from([0.0, 0.0, 0.1, 0.3]),
    "seed": st.integers(0, 2**16),
}
ACTIONS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "publish": {"entity": st.sampled_from(ENTITIES)},
    "publish_batch": {"members": st.lists(st.sampled_from(ENTITIES), min_size=1, max_size=3, unique=True)},
    "deliver": _FAULT,
    "crash_after_starts": {},
    "heartbeat": _FAULT,
    "stop": {},
    "time_out": {},
    "time_passes": {},
    "cancel": {"entity": st.sampled_from(ENTITIES), "undo": st.booleans()},
    "fix": {"entity": st.sampled_from(ENTITIES)},
    "redrive": {},
    "send_event": {"entity": st.sampled_from(ENTITIES)},
    "cancel_durable": {"entity": st.sampled_from(ENTITIES), "undo": st.booleans()},
}
WEIGHTS = {
    "publish": 3,
    "publish_batch": 1,
    "deliver": 6,
    "crash_after_starts": 1,
    "heartbeat": 2,
    "stop": 1,
    "time_out": 1,
    "time_passes": 2,
    "cancel": 1,
    "fix": 1,
    "redrive": 1,
    "send_event": 2,
    "cancel_durable": 1,
}


class Faults:
    """Throttles on one side's own calls (never an ordinary job's: its thread has a current run): one-shot, on the
    next call of a kind after `skip` others, and, while a step lasts, each call at `rate`."""

    def __init__(self) -> None:
        self.armed: dict[tuple[str, str], int] = {}
        self.fired: Counter[str] = Counter()
        self.refused_items: set[str] = set()
        self.rate = 0.0
        self.rng = random.Random(0)

    def hook(self, service: str) -> Any:
        def refuse(params: dict[str, Any], model: Any, **_: Any) -> None:
            target = (service, model.name)
            if current_run() is not None:
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
            raise ClientError({"Error": {"Code": THROTTLED[service], "Message": "injected by the model"}}, model.name)

        return refuse


class DurableLives(RuleBasedStateMachine):
    """One account, one queue with a durable job, one worker environment and the durable function's runner."""

    def __init__(self) -> None:
        super().__init__()
        record_senders()
        serialize_moto()
        enforce_message_limits()
        self._aws = mock_aws()
        self._aws.start()
        modelled.reset()
        self.harness = Harness.provisioned(ClientFactory(session=new_session(region_name=REGION)), CATALOG)
        self.faults = {side: Faults() for side in SIDES}
        session = self.harness.deployment.worker_session(self.harness.clients("sts"), QUEUE, "test-dlife-durable")
        runtime_clients = ClientFactory(session=session)
        worker_clients = self.harness.worker_clients(QUEUE)
        for side, clients in (("worker", worker_clients), ("durable", runtime_clients)):
            for service in ("dynamodb", "sqs"):
                clients.register(f"before-parameter-build.{service}", self.faults[side].hook(service))
        runtime = DurableRuntime(
            DurableSettings(worker=self.harness.deployment.worker_settings(QUEUE), job=JOB),
            runtime_clients,
            observability=Observability.create(output=self.harness.output),
        )
        self.functions = LocalDurableFunctions(
            {JOB: (durable_function_name("test", JOB), runtime)}, state_dir=None, skip_time=True
        )
        self.worker = self._new_worker()
        self.table = self.harness.deployment.idempotency_table
        self.local = self.harness.deployment.queues[QUEUE]
        self.records = DurableRecords(lambda: self.harness.clients("dynamodb"), self.table, 3600)
        # A sender's: an ordinary boto3 Lambda client at the durable functions' callback API.
        callbacks = self.functions.callbacks_client(REGION)
        self.events = JobEvents(self.harness.clients("dynamodb"), callbacks, self.table)
        # Per key, the nonces of the events its sender was told it sent.
        self.sent: defaultdict[str, set[int]] = defaultdict(set)
        self.published = 0
        self.keys: set[str] = set()
        self.batches: list[tuple[str, list[str]]] = []
        self.receipts: list[str] = []
        # What the model has seen: per key, its record's generation, and the STARTS and EFFECTS counts and the
        # generation when it was first seen SUCCEEDED; its dead letters (their IDs), ever; per published message, its
        # dead letters and how often a redrive sent it back; the entities stopped or timed out (their evidence).
        self.generation: dict[str, int] = {}
        self.succeeded: dict[str, tuple[int, int, int]] = {}
        self.dead: defaultdict[str, set[str]] = defaultdict(set)
        self.dead_letters_of: defaultdict[str, set[str]] = defaultdict(set)
        self.redriven: Counter[str] = Counter()
        self.ended_by: defaultdict[str, set[str]] = defaultdict(set)
        self.ever_cancelled: set[str] = set()
        # Durable keys an operator cancelled at least once (their later copies start nothing while it stands).
        self.durable_cancelled: set[str] = set()

    def _new_worker(self) -> Worker:
        return Worker(
            settings=self.harness.deployment.worker_settings(QUEUE),
            clients=self.harness.worker_clients(QUEUE),
            observability=Observability.create(output=self.harness.output),
            durable_starter=self.functions,
            durable_executions=self.functions,
        )

    def teardown(self) -> None:
        try:
            self._settle()
        finally:
            modelled.release()
            with contextlib.suppress(AssertionError):
                self._at_rest(hung_too=True)
            self.functions.close()
            wait_for_abandoned_runs()
            self._aws.stop()

    # --- the steps ------------------------------------------------------------------------------------------------

    @initialize(plan_list=st.lists(plans, min_size=len(ENTITIES), max_size=len(ENTITIES)))
    def plan(self, plan_list: list[modelled.Plan]) -> None:
        modelled.PLANS.update(dict(zip(ENTITIES, plan_list, strict=True)))

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        """One thing that happens, drawn by its weight, with what it needs; then the executions come to rest."""
        action = data.draw(st.sampled_from(self._actions()), label="action")
        draw = {name: data.draw(strategy, label=name) for name, strategy in ACTIONS[action].items()}
        getattr(self, action)(**draw)
        self._at_rest()
        RAN["steps"] += 1

    def _actions(self) -> list[str]:
        weighted = [name for name, weight in WEIGHTS.items() for _ in range(weight)]
        if self.published >= MAX_PUBLISHES:
            weighted = [name for name in weighted if name != "publish"]
        if len(self.batches) >= MAX_BATCHES:
            weighted = [name for name in weighted if name != "publish_batch"]
        return weighted

    def publish(self, entity: str) -> None:
        # `m` tells this message apart from every other: a message is dead-lettered once per life.
        self.harness.send(json.dumps({"job": JOB, "id": entity, "m": self.published}), queue=QUEUE)
        self.published += 1
        self.keys.add(_key(entity))
        RAN["publish"] += 1

    def publish_batch(self, members: list[str]) -> None:
        number = len(self.batches)
        batch_id = self.harness.stack_publisher().batch(
            [(JOB, entity) for entity in members], on_complete=(FOLLOW_UP, f"batch-{number}")
        )
        self.batches.append((batch_id, members))
        self.keys.update(_key(entity) for entity in members)
        RAN["batch"] += 1

    def deliver(self, side: str, fault: tuple[str, str] | None, skip: int, rate: float, seed: int) -> None:
        """One poll of the queue by the warm environment, with one of a side's own calls throttled if `fault` names
        one (the `skip`-th such call: after a success too, and in the executions it starts) and each at `rate`
        until they are at rest."""
        with self._faulted(side, fault, skip, rate, seed):
            invocation = self.harness.deliver(QUEUE, worker=self.worker)
            if invocation is not None:
                self._keep_receipts(invocation)
                RAN["deliver"] += 1
            self._at_rest()

    def crash_after_starts(self) -> None:
        """A new environment takes a batch, starts its executions, and dies before its answer."""
        mapping = self.harness.mapping(QUEUE, chaos=Chaos(ChaosSettings(crash=1.0)))
        invocation = mapping.poll_once(self._new_worker().handle, timeout_s=CRASHED_TIMEOUT_S)
        if invocation is not None:
            self._keep_receipts(invocation)
            RAN["crash"] += 1

    def heartbeat(self, side: str, fault: tuple[str, str] | None, skip: int, rate: float, seed: int) -> None:
        """The heartbeat canary through the queue; whichever poll takes it sweeps (a fault may hit the sweep)."""
        self.harness.send(heartbeat_body(), queue=QUEUE)
        RAN["heartbeat"] += 1
        self.deliver(side, fault, skip, rate, seed)

    def stop(self) -> None:
        """StopDurableExecution of every hung execution; then its code goes on, unwaited, as a stopped one's may."""
        for key, generation in list(modelled.HUNG):
            self.functions.stop(JOB, self._arn(key, generation))
            self.ended_by[key].add("DurableExecutionStopped")
            RAN["stopped"] += 1
        modelled.release()

    def time_out(self) -> None:
        """Every hung execution reaches its execution timeout: the runner's own timeout, fired now."""
        from aws_durable_execution_sdk_python.lambda_service import ErrorObject

        executor = self.functions._executor(JOB)
        for key, generation in list(modelled.HUNG):
            executor.on_timed_out(self._arn(key, generation), ErrorObject.from_message("Execution timed out."))
            self.ended_by[key].add("DurableExecutionTimedOut")
            RAN["timed out"] += 1
        modelled.release()

    def time_passes(self) -> None:
        """Every message handed back or left by a crash is due again, and a follow-up's run that never reported
        back has passed its hold."""
        sqs = self.harness.clients("sqs")
        for receipt in self.receipts:
            with contextlib.suppress(ClientError):  # deleted since, or received again
                sqs.change_message_visibility(QueueUrl=self.local.url, ReceiptHandle=receipt, VisibilityTimeout=0)
        self.receipts.clear()
        dynamodb, now = self.harness.clients("dynamodb"), time.time()
        for page in dynamodb.get_paginator("scan").paginate(TableName=self.table):
            for item in page["Items"]:
                if item.get("status", {}).get("S") == "INPROGRESS" and "in_progress_expiration" in item:
                    dynamodb.update_item(
                        TableName=self.table,
                        Key={"id": item["id"]},
                        UpdateExpression="SET #at = :past",
                        ExpressionAttributeNames={"#at": "in_progress_expiration"},
                        ExpressionAttributeValues={":past": {"N": str(int(now * 1000) - 1)}},
                    )
        RAN["time"] += 1

    def cancel(self, entity: str, undo: bool) -> None:
        """The operator cancels (or undoes the cancel of) an entity's follow-up (jobctl can't cancel a durable job:
        stopping its execution is how)."""
        key = f"{FOLLOW_UP}:after-{entity}"
        target = CancelTarget(queue=QUEUE, job=FOLLOW_UP, job_id=f"after-{entity}", key=key, expiry_s=3600, tenant="")
        dynamodb = self.harness.clients("dynamodb")
        if undo:
            withdraw(dynamodb, self.table, target)
            RAN["undo"] += 1
        else:
            cancel_job(dynamodb, self.table, target, OPERATOR)
            self.ever_cancelled.add(key)
            RAN["cancel"] += 1

    def cancel_durable(self, entity: str, undo: bool) -> None:
        """The operator cancels the entity's durable job as `jobctl job cancel` does (its record says cancelled, its
        running execution is stopped), or withdraws the cancel."""
        key = _key(entity)
        if undo:
            self.records.withdraw_cancel(key)
            RAN["durable undo"] += 1
            return
        state = self.records.cancel(key, OPERATOR)
        self.durable_cancelled.add(key)
        if state.status in (STARTING, RUNNING) and state.execution_arn:
            with contextlib.suppress(Exception):  # it ended meanwhile: nothing to stop
                self.functions.stop(JOB, state.execution_arn, f"cancelled by {OPERATOR}")
            self.ended_by[key].update({"JobCancelledError", "DurableExecutionStopped"})
        RAN["durable cancel"] += 1

    def fix(self, entity: str) -> None:
        modelled.FIXED.add(entity)
        RAN["fixed"] += 1

    def redrive(self) -> None:
        RAN["redriven"] += redrive_all(self.harness, self.local, self.redriven)

    def send_event(self, entity: str) -> None:
        """A sender sends the event EVENT to the entity's job: taken by a waiting execution, else refused."""
        nonce = sum(len(sent) for sent in self.sent.values()) + RAN["event refused"]
        try:
            self.events.send(JOB, entity, modelled.EVENT, {"n": nonce})
        except EventNotAwaitedError:
            RAN["event refused"] += 1
            return
        self.sent[_key(entity)].add(nonce)
        RAN["event sent"] += 1

    # --- what must always hold --------------------------------------------------------------------------------------

    @invariant()
    def promises_hold(self) -> None:
        self._see_dead_letters()
        starts, effects = list(modelled.STARTS), list(modelled.EFFECTS)
        for entity in ENTITIES:
            key = _key(entity)
            record = self.records.read(key)
            seen = self.generation.get(key, 0)
            assert record.generation >= seen, f"{key}: generation {seen}, then {record.generation}: went back"
            self.generation[key] = record.generation
            dead = len(self.dead[key])
            assert record.generation <= dead <= record.generation + 1, (
                f"{key}: generation {record.generation} with {dead} dead letter(s): not one per life"
            )
            if key in self.succeeded:
                at_starts, at_effects, generation = self.succeeded[key]
                assert (record.status, record.generation) == (SUCCEEDED, generation), (
                    f"{key} SUCCEEDED at generation {generation}, then {record.status} at {record.generation}: "
                    "a final state was overwritten"
                )
                later = [s for s in starts[at_starts:] if s.key == key]
                assert not later, f"{key} ran a step again after its success was recorded: {later}"
                made = [e for e in effects[at_effects:] if e.key == key and not e.cut]
                assert not made, f"{key}'s side effect repeated after its success was recorded: {made}"
            elif record.status == SUCCEEDED:
                self.succeeded[key] = (len(starts), len(effects), record.generation)
        # An execution that succeeded has its success in its record (no late writer took it back).
        for execution in self.functions.executions(JOB):
            if not execution.is_complete:
                continue
            result = self.functions.wait(JOB, execution.durable_execution_arn, timeout_s=1)
            if result.status.value == SUCCEEDED:
                start = json.loads(str(execution.start_input.input))
                record = self.records.read(start["key"])
                assert (record.status, record.generation) == (SUCCEEDED, start["generation"]), (
                    f"{start['key']}'s execution {start['generation']} succeeded; its record says {record.status} "
                    f"at generation {record.generation}"
                )
        for key, count in Counter(modelled.RETURNED).items():
            assert count == 1 or idempotency_record_id(key) in self.faults["worker"].refused_items, (
                f"{key} ran {count} times, its completion never refused"
            )

    def _see_dead_letters(self) -> None:
        """Every dead letter now in the DLQ, read without taking it (moto's own state), checked for its evidence."""
        for message in dlq_messages(self.local):
            body = json.loads(message.body)
            entity = body["id"]
            attributes = {name: value.get("StringValue") for name, value in message.message_attributes.items()}
            assert body["job"] == JOB, f"a dead letter of {body['job']}: only the durable job may fail"
            error_type = attributes.get("jobs.error_type")
            assert error_type and attributes.get("jobs.failure"), f"a dead letter of {entity} without evidence"
            assert 1 <= int(attributes["jobs.attempts"]) <= MAX_ATTEMPTS, f"{entity}: attempts {attributes}"
            assert error_type in self._explained(entity), (
                f"{entity}'s dead letter says {error_type}: {attributes.get('jobs.error_message')}; its plan "
                f"{modelled.PLANS[entity]} and what ended it ({sorted(self.ended_by[_key(entity)])}) don't say so"
            )
            self.dead[_key(entity)].add(message.id)
            sent = message_of(body)
            self.dead_letters_of[sent].add(message.id)
            assert len(self.dead_letters_of[sent]) <= 1 + self.redriven[sent], (
                f"message {sent} of {entity} dead-lettered {len(self.dead_letters_of[sent])} times, redriven "
                f"{self.redriven[sent]}: a second dead letter of one life"
            )

    def _explained(self, entity: str) -> set[str]:
        """The error types an entity's dead letter may say: its plan's, and how the model ended its executions."""
        plan = modelled.PLANS[entity]
        explained = set(self.ended_by[_key(entity)])
        if plan.transient >= MAX_ATTEMPTS:
            explained.add("TransientError")
        if plan.permanent:
            explained.add("PermanentError")
        if plan.nondeterministic:
            explained.add("NonDeterministicExecutionError")
        if plan.nested:
            explained.add("DurableMisuseError")
        if plan.awaits:
            explained.add("EventTimeoutError")
        return explained

    # --- settling -----------------------------------------------------------------------------------------------

    def _settle(self) -> None:
        """No fault any more, hung executions let go: everything due runs, and the sweep ends what ended without
        its end, until nothing changes; then what must hold at rest."""
        for faults in self.faults.values():
            RAN.update({f"fault {name}": count for name, count in faults.fired.items()})
            faults.armed.clear()
            faults.rate = 0.0
        modelled.release()
        self._at_rest(hung_too=True)
        for _ in range(40):
            self.time_passes()
            invocation = self.harness.deliver(QUEUE, worker=self.worker)
            if invocation is not None:
                self._keep_receipts(invocation)
                self._at_rest(hung_too=True)
                continue
            if self.harness.queue_counts(QUEUE) != (0, 0):
                continue
            self.harness.send(heartbeat_body(), queue=QUEUE)
            self.harness.deliver(QUEUE, worker=self.worker)
            self._at_rest(hung_too=True)
            if self.harness.queue_counts(QUEUE) == (0, 0):
                break
        else:
            raise AssertionError(f"the queue never emptied: {self.harness.queue_counts(QUEUE)} left")
        wait_for_abandoned_runs()
        self.promises_hold()
        returned = Counter(modelled.RETURNED)
        for key in self.keys:
            record = self.records.read(key)
            if record.status is None and key in self.durable_cancelled:
                RAN["cancelled unstarted"] += 1  # cancelled before any start: its copies were acknowledged unrun
                continue
            assert record.status not in (STARTING, RUNNING, None), f"{key} was published and is {record.status}: lost"
            if record.status == FAILED:
                assert len(self.dead[key]) == record.generation >= 1, (
                    f"{key} FAILED at generation {record.generation} with {len(self.dead[key])} dead letter(s)"
                )
            entity = key.split(":", 1)[1]
            follow_up = f"{FOLLOW_UP}:after-{entity}"
            if modelled.PLANS[entity].follow_up and record.status == SUCCEEDED:
                assert returned[follow_up] == 1 or follow_up in self.ever_cancelled, f"{key}'s follow-up is lost"
                RAN["follow-up checked"] += 1
            else:
                assert returned[follow_up] == 0, f"{key} is {record.status}, yet its follow-up ran"
        self._check_batches(returned)
        listed = jobs_in_flight(self.harness.clients("dynamodb"), self.table, [QUEUE]).jobs
        assert not [job for job in listed if job.job == JOB], f"ended executions still listed in flight: {listed}"
        received = {(key, nonce) for key, _, nonce in modelled.RECEIVED}
        for key, nonces in self.sent.items():
            lost = {nonce for nonce in nonces if (key, nonce) not in received}
            assert not lost, f"{key}: events {sorted(lost)} were sent, and no wait of its got them"
            RAN["event checked"] += len(nonces)
        RAN["examples"] += 1

    def _check_batches(self, returned: Counter[str]) -> None:
        dynamodb = self.harness.clients("dynamodb")
        for number, (batch_id, members) in enumerate(self.batches):
            item = dynamodb.get_item(TableName=self.table, Key={"id": {"S": batch_item_id(batch_id)}})["Item"]
            succeeded, dead = member_indices(item, "succeeded"), member_indices(item, "dead")
            assert len(succeeded | dead) == len(members) and not succeeded & dead, (
                f"batch {number} of {len(members)}: succeeded {sorted(succeeded)}, dead {sorted(dead)}"
            )
            for index in succeeded:
                record = self.records.read(_key(members[index]))
                assert record.status == SUCCEEDED, f"batch {number}'s member {index} counted succeeded, {record}"
            callback = f"{FOLLOW_UP}:{callback_key(batch_id, 'complete')}"
            assert returned[callback] == 1, f"batch {number}'s on_complete ran {returned[callback]} times"
            RAN["batch settled"] += 1

    # --- reading what is there ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _faulted(self, side: str, fault: tuple[str, str] | None, skip: int, rate: float, seed: int) -> Any:
        faults = self.faults[side]
        if fault is not None:
            faults.armed[fault] = skip
        faults.rate, faults.rng = rate, random.Random(seed)
        try:
            yield
        finally:
            faults.rate = 0.0
            faults.armed.clear()

    def _at_rest(self, hung_too: bool = False) -> None:
        """Wait until every execution has ended or hangs, and no code of the job runs but the hung executions'."""
        deadline = time.monotonic() + REST_S
        while True:
            if hung_too:  # settling: what hangs from now on is let go too, and what waits gets its event
                modelled.release()
                for entity in ENTITIES:
                    if self.records.read(_key(entity)).waiting_for is not None:
                        self.send_event(entity)
            hung = {execution_name(key, generation) for key, generation in modelled.HUNG}
            running = [
                e
                for e in self.functions.executions(JOB)
                if not e.is_complete and (hung_too or e.start_input.execution_name not in hung) and not _awaits_event(e)
            ]
            if not running and modelled.active() == (0 if hung_too else len(hung)):
                return
            if time.monotonic() > deadline:
                names = [e.start_input.execution_name for e in running]
                raise AssertionError(f"executions never came to rest: {names}")
            time.sleep(0.02)

    def _arn(self, key: str, generation: int) -> str:
        name = execution_name(key, generation)
        [execution] = [e for e in self.functions.executions(JOB) if e.start_input.execution_name == name]
        return str(execution.durable_execution_arn)

    def _keep_receipts(self, invocation: Any) -> None:
        self.receipts.extend(
            record["receiptHandle"]
            for record in invocation.event["Records"]
            if record["messageId"] not in invocation.deleted
        )


def _key(entity: str) -> str:
    return f"{JOB}:{entity}"


def _awaits_event(execution: Any) -> bool:
    """The execution is suspended on a callback: at rest until its event is sent or its wait times out."""
    return any(
        operation.operation_type.value == "CALLBACK" and operation.status.value == "STARTED"
        for operation in execution.operations
    )


def test_every_durable_ending_keeps_its_promises(monkeypatch: pytest.MonkeyPatch) -> None:
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
    started = time.monotonic()
    run_state_machine_as_test(DurableLives, settings=budget)
    print(
        f"durable model: {RAN['examples']} examples, {RAN['steps']} steps in {time.monotonic() - started:.0f} s: "
        f"{dict(sorted(RAN.items()))}"
    )
    assert RAN["examples"] >= EXAMPLES // 2 and RAN["deliver"] >= EXAMPLES
