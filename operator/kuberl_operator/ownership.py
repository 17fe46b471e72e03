"""The operator acts only on objects it owns, as Kubernetes' own controllers do: a child is the
job's when its controller ownerReference names the job's UID (every child is created with one).

Children have fixed names (builders.child_refs), so anyone may hold one before the job exists: a
RayCluster, a `<job>-head` PodDisruptionBudget, a `<job>-job` ConfigMap of another team's. Such an
object is never changed or deleted, and no child is created around it:
- `taken_names` reads the names and says which objects the job does not own hold. The reconciler
  reads them while the job has no Ray cluster of its own (its children would be created next) and
  the decider fails the job (NameConflict) or waits for an earlier job's leftovers; the admission
  webhook reads them on create and refuses the job up front.
- `ensure_child` creates one child unless it exists. One that exists is updated in place only when
  it is the job's, and with its UID in the patch, so a name that changed hands in between is
  refused by Kubernetes rather than overwritten.

The Ray auth Secret is the exception: the operator may not read Secrets, so its name is keyed
(builders.auth_secret_name) and never looked for; an existing one is the job's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from kuberl_operator.builders import ChildRef
from kuberl_operator.kube import Kube, Object, path
from kuberl_operator.observe import taken_name
from kuberl_operator.status import TakenName

# Children kept from an earlier attempt that take the spec as it is now: the manifest the driver
# trains, the head's disruption budget (spec.learner.disruptionBudget).
UPDATED_IN_PLACE = {"ConfigMap": "data", "PodDisruptionBudget": "spec"}

logger = logging.getLogger(__name__)


async def taken_names(
    kube: Kube, namespace: str, job_name: str, uid: str, refs: Iterable[ChildRef]
) -> list[TakenName]:
    """The names among `refs` (children of the job `namespace/job_name` with UID `uid`) that
    objects the job does not own hold, read at once."""
    refs = [ref for ref in refs if not ref.keyed]
    found = await asyncio.gather(
        *(kube.get(path(ref.api_version, ref.plural, namespace, ref.name)) for ref in refs)
    )
    taken = (
        taken_name(ref.kind, obj, job_name, uid)
        for ref, obj in zip(refs, found, strict=True)
        if obj is not None
    )
    return [name for name in taken if name is not None]


async def ensure_child(
    kube: Kube, ref: ChildRef, child: Object, namespace: str, job_name: str, uid: str
) -> bool:
    """Create `child` (where `ref` says) unless it exists; update one that exists in place, where
    its kind takes the spec as it is now, if it is the job's. False when the name is held by an
    object the job does not own (left alone) or went away meanwhile: the caller stops there, and
    its next look at the names decides."""
    if await kube.create(path(ref.api_version, ref.plural, namespace), child) is not None:
        return True
    if ref.keyed:  # nobody else can know its name: an existing one is the job's
        return True
    child_path = path(ref.api_version, ref.plural, namespace, ref.name)
    existing = await kube.get(child_path)
    if existing is None:
        return False
    if taken := taken_name(ref.kind, existing, job_name, uid):
        logger.warning("%s: %s; creating nothing more", job_name, taken.describe())
        return False
    if field := UPDATED_IN_PLACE.get(ref.kind):
        # The UID is immutable: with it in the patch, Kubernetes refuses to patch another object
        # that took the name since it was read.
        patch = {"metadata": {"uid": existing["metadata"]["uid"]}, field: child[field]}
        await kube.merge_patch(child_path, patch)
    return True
