"""The write-side check of a keyless approver (review left32, finding 2): ``approve --sigstore``
and ``revoke NAME@V --approval --sigstore`` by an identity that may not sign them are refused
before anything is signed, as a key that may not is (`policy_state.check_signers`,
`status.withdraw`).

Scope: the identity of the OIDC token a `sigstore_sign.KeylessSigner` will sign with, judged
against the approver identities of the policy in force and, for a withdrawal, the identities
whose verified bundles signed the approval (verifiers' rule: `verify.retractions.authority`).
Non-scope: judging the record once signed (verifiers do, from its certificate).

The certificate's subject (SAN) is Fulcio's, derived from the token's claims by rules of the
issuer (an email provider's ``email``; GitHub Actions' ``https://github.com/`` +
``job_workflow_ref``, not its ``sub``), so a token's identity claim alone could refuse a
right approver. The rule refuses only what cannot sign as one: an allowed identity might be
this token's when its issuer is the token's (sigstore's ``federated_issuer``: what Fulcio
writes) and some text claim of the token stands in its subject as a whole part (`_names_in`:
not inside a longer name, review rev30). Anything else is signed and left to verifiers, as
before.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from trajledger.verify.errors import PolicyError

if TYPE_CHECKING:
    from trajledger.verify.keys import Identity
    from trajledger.verify.policy import TrustPolicy

    from .home import LedgerHome
    from .sigstore_sign import KeylessSigner

__all__ = ["approval_signers", "check_keyless_approver", "might_be", "token_claims"]


def token_claims(token: Any) -> tuple[str, set[str]]:
    """The issuer a certificate of ``token`` (a ``sigstore.oidc.IdentityToken``) names and
    every non-empty text of its claims (nested ones too), read unverified as sigstore reads
    them (Fulcio verifies the token)."""
    try:
        payload = str(token).split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error):
        claims = {}  # (sigstore parsed it: not reached)
    return str(token.federated_issuer), set(_texts(claims))


def _texts(value: object) -> Iterator[str]:
    """Every non-empty text in a JSON value, nested objects and arrays too."""
    if isinstance(value, str) and value:
        yield value
    elif isinstance(value, dict | list):
        for v in value.values() if isinstance(value, dict) else value:
            yield from _texts(v)


_GOES_ON = frozenset(".-_+%~")
"""Characters that go on with a name (an email's local part or domain, a path's segment): a
claim next to one, or to a letter or digit, is part of a longer name in the subject."""


def _might_be(identity: Identity, issuer: str, texts: set[str]) -> bool:
    return identity.issuer == issuer and any(_names_in(t, identity.subject) for t in texts)


def _names_in(text: str, subject: str) -> bool:
    """Whether ``text`` stands in ``subject`` as a whole part: at its start or after a
    separator (``/``, ``:``, ``@``, ``!``...), and at its end or before one, as every Fulcio
    template places a claim (an email whole; ``{{ .url }}/{{ .job_workflow_ref }}``,
    ``username!domain``, Codefresh's ``.../{{.pipeline_name}}:{{.account_id}}/...``). Not
    within a longer name: ``ice@example.com`` or ``alice@example.co`` in ``alice@example.com``
    (review rev30, finding 2)."""
    at = subject.find(text)
    while at >= 0:
        end = at + len(text)
        if not (at and _goes_on(subject[at - 1])) and not (end < len(subject)
                                                            and _goes_on(subject[end])):
            return True
        at = subject.find(text, at + 1)
    return False


def _goes_on(char: str) -> bool:
    return char.isalnum() or char in _GOES_ON


def might_be(signer: KeylessSigner) -> tuple[Any, Callable[[Iterable[Identity]], bool]]:
    """The token ``signer`` will sign with, and whether one of some identities might be its
    (the rule `check_keyless_approver` refuses by: `_might_be`)."""
    token = signer.identity_token()
    issuer, texts = token_claims(token)
    return token, lambda identities: any(_might_be(i, issuer, texts) for i in identities)


def check_keyless_approver(
    ledger: LedgerHome, signer: KeylessSigner, action: str, *,
    approval: tuple[int, str] | None = None,
) -> None:
    """Refuse, before signing, a keyless approval or withdrawal whose token cannot be one of
    the identities that may sign it: an approver identity of the policy in force, or, for the
    withdrawal of ``approval`` (its log index and envelope digest), an identity that signed
    that approval (its Sigstore bundle verified, `approval_signers`) and that the policy
    still names. No policy in force: nothing to check.

    Raises:
        PolicyError: the token's identity may not sign it (nothing signed).
        KeyError_: no usable token, or ``sigstore`` is missing (`KeylessSigner.identity_token`).
    """
    from .policy_state import current_policy

    found = current_policy(ledger)
    if found is None:
        return
    policy = found[1]
    token, maybe = might_be(signer)
    approvers = policy.role("approver").identities
    if maybe(approvers):
        return
    # The approval's own signer may withdraw it while the policy names that identity
    # (`verify.retractions.authority`: a withdrawal's identities are its roles').
    signed = (approval_signers(ledger, policy, *approval) & {
        *policy.role("producer").identities, *approvers} if approval else frozenset())
    if maybe(signed):
        return
    who = f"the Sigstore identity {token.identity} (issuer {token.federated_issuer})"
    names = _listed(approvers)
    if approval is None:
        raise PolicyError(
            f"{action}: {who} is no approver identity of policy {policy.name!r} serial "
            f"{policy.serial} (its approver identities: {names}): sign with an approver's "
            "token or key; nothing was signed")
    raise PolicyError(
        f"approval at log index {approval[0]}: {who} is no approver identity of policy "
        f"{policy.name!r} serial {policy.serial} and did not sign it: only an approver "
        f"(identities: {names}), or its signer while the policy names it ({_listed(signed)}), "
        "may withdraw an approval (a producer revokes its data instead); nothing was signed")


def _listed(identities: Iterable[Identity]) -> str:
    return ", ".join(f"{i.subject} ({i.issuer})" for i in sorted(
        identities, key=lambda i: (i.subject, i.issuer))) or "none"


def approval_signers(ledger: LedgerHome, policy: TrustPolicy, index: int,
                      envelope: str) -> frozenset[Identity]:
    """The identities whose keyless signatures of the approval at log ``index`` (envelope
    digest ``envelope``) verify as a verifier verifies them: against the approver identities
    of the policy it was logged under, each bundle stored under its keyid, with that policy's
    Sigstore trusted root (`verify.judge`); unreadable or damaged evidence counts for
    nothing."""
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.errors import FormatError, ProvenanceError
    from trajledger.verify.sigstore_adapter import identity_signers, trusted_root_bytes

    then = policy.policy_at(index)
    approvers = then.role("approver").identities
    if not approvers:
        return frozenset()

    def blob(digest: str) -> bytes | None:
        try:
            return ledger.store.get(digest) if ledger.store.exists(digest) else None
        except (ProvenanceError, OSError):
            return None

    data = blob(envelope)
    try:
        env = Envelope.from_bytes(data) if data is not None else None
    except FormatError:
        env = None
    if env is None:
        return frozenset()
    found, _notes = identity_signers(env, blob, approvers,
                                     trusted_root=trusted_root_bytes(then.sigstore_trusted_root))
    return found
