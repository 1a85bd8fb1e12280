"""`keyless_check.check_keyless_approver` refuses only a token that cannot sign as one of the
identities that may (review left32, finding 2): Fulcio derives a certificate's subject from the
token's claims by its issuer's rules, so a right approver whose subject is not the token's
``sub`` (GitHub Actions: ``https://github.com/`` + ``job_workflow_ref``) is not refused."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any

import pytest

from trajledger.ledger import keyless_check, policy_state
from trajledger.verify.errors import PolicyError
from trajledger.verify.keys import Identity

GITHUB = "https://token.actions.githubusercontent.com"
WORKFLOW = "https://github.com/acme/data/.github/workflows/approve.yml@refs/heads/main"


class Token:
    """What `KeylessSigner.identity_token` gives: its text is the raw JWT."""

    def __init__(self, claims: dict[str, Any], federated_issuer: str | None = None) -> None:
        body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        self.raw = f"eyJhbGciOiJub25lIn0.{body}.sig"
        self.federated_issuer = federated_issuer or claims["iss"]
        self.identity = claims.get("email", claims["sub"])

    def __str__(self) -> str:
        return self.raw


def check(monkeypatch: pytest.MonkeyPatch, token: Token, approvers: list[Identity]) -> None:
    role = SimpleNamespace(identities=tuple(approvers))
    policy = SimpleNamespace(name="p", serial=3, role=lambda _name: role)
    monkeypatch.setattr(policy_state, "current_policy", lambda _ledger: ([], policy))
    signer = SimpleNamespace(identity_token=lambda: token)
    keyless_check.check_keyless_approver(object(), signer, "approve d@1")


def test_a_github_workflow_approver_is_not_refused_for_its_sub(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = Token({"iss": GITHUB, "sub": "repo:acme/data:ref:refs/heads/main",
                   "job_workflow_ref": "acme/data/.github/workflows/approve.yml@refs/heads/main"})
    check(monkeypatch, token, [Identity(GITHUB, WORKFLOW)])  # no PolicyError


def test_a_token_of_another_issuer_or_subject_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    alice = Identity("https://accounts.google.com", "alice@example.com")
    other = Token({"iss": "https://idp.example", "sub": "alice@example.com",
                   "email": "alice@example.com"})
    with pytest.raises(PolicyError, match=r"^approve d@1: the Sigstore identity "
                       r"alice@example.com \(issuer https://idp.example\) is no approver "
                       r"identity of policy 'p' serial 3 \(its approver identities: "
                       r"alice@example.com \(https://accounts.google.com\)\)"):
        check(monkeypatch, other, [alice])
    mallory = Token({"iss": "https://accounts.google.com", "sub": "1234",
                     "email": "mallory@example.com"})
    with pytest.raises(PolicyError, match=r"mallory@example\.com"):
        check(monkeypatch, mallory, [alice])
    # Sigstore's own federated issuer: the certificate names the upstream one.
    federated = Token({"iss": "https://oauth2.sigstore.dev/auth", "sub": "x",
                       "email": "alice@example.com"}, "https://accounts.google.com")
    check(monkeypatch, federated, [alice])


def test_no_policy_in_force_checks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_state, "current_policy", lambda _ledger: None)
    signer = SimpleNamespace(identity_token=lambda: pytest.fail("no token read"))
    keyless_check.check_keyless_approver(object(), signer, "approve d@1")


@pytest.mark.parametrize("email", ["ice@example.com", "e@example.com", "alice@example.co",
                                   "lice@example.co", "x@example.com", "alice@exam"])
def test_a_token_whose_identity_is_part_of_an_approvers_name_is_refused(
    monkeypatch: pytest.MonkeyPatch, email: str,
) -> None:
    """review rev30, finding 2: a claim counted when it appeared anywhere in an approver's
    subject, so the identity ``ice@example.com`` (or ``alice@example.co``, another domain)
    passed as ``alice@example.com`` and was signed; it must stand there as a whole part."""
    google = "https://accounts.google.com"
    approvers = [Identity(google, "alice@example.com"), Identity(google, "alice.x@example.com")]
    with pytest.raises(PolicyError, match=rf"the Sigstore identity {email} "):
        check(monkeypatch, Token({"iss": google, "sub": "1234", "email": email}), approvers)


@pytest.mark.parametrize(("claims", "subject"), [
    ({"email": "alice@example.com"}, "alice@example.com"),
    ({"job_workflow_ref": "acme/data/.github/workflows/approve.yml@refs/heads/main"}, WORKFLOW),
    ({"ci_config_ref_uri": "gitlab.com/g/p//.gitlab-ci.yml@refs/heads/main"},
     "https://gitlab.com/g/p//.gitlab-ci.yml@refs/heads/main"),
    ({"organization_slug": "acme", "pipeline_slug": "data"}, "https://buildkite.com/acme/data"),
    ({"account_name": "acme", "pipeline_name": "proj/pipe", "account_id": "64f4",
      "pipeline_id": "9"}, "https://g.codefresh.io/acme/proj/pipe:64f4/9"),
    ({"sub": "alice"}, "alice!example.com"),
    ({"kubernetes.io": {"namespace": "ci", "serviceaccount": {"name": "signer"}}},
     "https://kubernetes.io/namespaces/ci/serviceaccounts/signer"),
])
def test_each_fulcio_template_places_a_claim_as_a_whole_part(
    monkeypatch: pytest.MonkeyPatch, claims: dict[str, Any], subject: str,
) -> None:
    """The subjects Fulcio's templates make (config/identity/config.yaml: GitHub, GitLab,
    Buildkite, Codefresh; the username and Kubernetes types) keep their approver: no refusal."""
    issuer = "https://issuer.example"
    check(monkeypatch, Token({"iss": issuer, "sub": "opaque-1", **claims}),
          [Identity(issuer, subject)])
