"""Generated histories between two ledgers: every path of the buyer agrees with a model (agree26).

tests/e2e/test_histories_agree.py (agree24, agree25) generates histories on one ledger; this
module generates them across two, a data vendor and a buyer, as docs/third-party.md has them
(tests/e2e/test_updates.py's parties: a vendor-only ledger whose producer key ``vendor`` the
buyer's policy names as a producer; the buyer's ``approver``, ``trainer`` and ``producer``).
A history (`generate`: ``random.Random(seed)``, 9 to 16 steps), every step through the CLI:

- the vendor records a batch (``vrecord``; now and then an exact copy of an earlier batch's
  episodes, ``copy``), creates a dataset of one or two of its batches (``vdataset``: train,
  now and then holdout), revokes a batch or dataset (``vrevoke``) or erases a batch
  (``verase``), each signed by ``vendor`` (a producer of what it revokes);
- the vendor ``ship``\\ s a batch or dataset: ``export REF`` (with ``--updates-since`` the
  size the buyer applied once it applied one) and the buyer ``import``\\ s it; or the vendor
  sends an update bundle alone (``update``: ``export --updates-since APPLIED``, imported);
- the buyer creates a dataset of batches it imported (``bdataset``: train, now and then
  holdout), approves a dataset (``bapprove``), trains a checkpoint on one, with or without a
  parent (``btrain``), makes its suite (``suite@1``, a holdout of a vendor batch of its own),
  evaluates a checkpoint on it (``beval``, a judge COMMAND) and releases it (``brelease``);
  most histories end so, then the vendor revokes or erases something and sends an update;
- drawn from streams of their own (`own_step`; a seed's other steps stay as they were): in half the
  histories the buyer's release requirement has a ``max_drop`` (R16), in four in ten it requires a
  second suite (R17), and the buyer's approver withdraws its newest approval of a dataset
  (``bwithdraw``: ``revoke`` of the approval), revokes a batch or dataset it holds (``brevoke``)
  or erases a batch it holds (``berase``); the vendor's approver (``vapprover``, named by the
  buyer's policy as an approver too) approves a vendor dataset (``vapprove``) or withdraws its
  newest approval (``vwithdraw``); once a history at most, the vendor declares its key ``vendor``
  compromised (``vcompromise``: a successor policy signed by ``vapprover``, producer ``vendor2``,
  and ``[[revoked_keys]]`` since a vendor record's log index, or since its log's size then);
- (hist30, streams of their own again) half the update steps ``monitor`` the vendor's served
  log instead of importing an update bundle (R18); in histories with a ``max_drop`` the judge
  scores each checkpoint and the loop's end evaluates the released checkpoint's parent too
  (R19); in three in ten, once, the buyer's approver marks the vendor's key compromised in
  the buyer's own policy (``bmark``: a successor without ``vendor`` as a producer and with it
  in ``[[revoked_keys]]`` since the buyer's log index of an import, or since now) (R20);
- (hist32, streams of their own again) the vendor's batches are of 24-step episodes, a copy
  exact, cut or noisy (R21); one vendor batch in ten, and half of those made for the buyer's
  suites, is recorded sealed, and three evaluations in ten are run by ``evaluator2`` (R22);
  in half the histories the buyer's approver sets its policy's ``[contamination]`` once or
  twice (``bcontam``, R21);
- (hist33, streams of their own again) in four in ten of the histories that train, the buyer's
  approver changes its policy's ``[release]`` once or twice (``brules``) and now and then
  releases again a checkpoint released before (R24); in half the histories the vendor holds
  its first batch out (``wh``, shipped to the buyer in half of those) and its approver sets the
  vendor's policy's ``[contamination]`` once or twice (``vcontam``, R25);
- (hist34, streams of their own again) R24's release of the buyer's own is made of batches the
  buyer records itself (``bown``, ``bownsuite``) just after the history's last suite is made,
  before the vendor's later steps, and in a quarter of the other histories too; in six
  histories in ten the vendor trains on one of its train sets (``vtrain``, once or twice; a
  train set of its own, ``wg1``, now and then of a copy of ``v1``), approved by its approver
  just before in eight in ten (R26);
- (hist35, streams of their own again) in four histories in ten the vendor records two
  batches of chat episodes (``v81``; ``v82``, a copy of it exact, equal once normalised or
  near, or unrelated), holds ``v81`` out now and then (``wt``), ships both, and the buyer holds
  ``v81`` out (``h81``), makes a train set of ``v82`` (``d82``), approves and trains on it
  (R28); in half the histories the buyer sells one or two of its train sets back to the vendor
  (``bsell``), whose approver names the buyer's producer key and log in its policy (``vtrust``,
  in nine in ten), approves them (eight in ten) and trains on them (``vtrain``) (R27);
- (hist36, a stream of its own again) in half the histories with a sale back, the vendor's
  approver names the buyer's approver in the vendor's policy (``vname``: before the first sale
  in half of those), and in seven in ten of those the buyer's approver then revokes or erases
  something the vendor shipped and a sale follows (R30);
- (hist37, a stream of its own again, drawn after every other) in six histories in ten, the
  vendor's checkpoint (``vc1``, ``vc2``: R26) is shipped to the buyer (``vckship``), whose
  approver names the vendor's trainer key in its policy (``bvtrust``: before the ship in eight
  in ten, after it, and a ship again, in the others); the buyer fine-tunes from it (``btrain``
  of ``c71`` with ``--parent``), the vendor's approver now and then withdraws its approval of
  the checkpoint's dataset (``vwithdraw``), and in eight in ten the vendor revokes a batch of
  it or the dataset (or, in a fifth of those, declares its key compromised since one) and the
  buyer runs ``monitor --fail-on-revocation`` (``bwatch``) (R31);
- (hist39, two streams of their own again, drawn after every other) in half the histories
  (hist39: without the buyer's marking, the vendor's compromise or a sale back; since hist40
  with them too), the buyer records one
  or two of the vendor's batches (the file the vendor recorded) or train sets (its batches,
  name, version and split) itself before an import brings the vendor's record of the same
  bytes (``bsame``), and in six in ten of those the vendor then revokes (or erases) one of
  them and an update, ``monitor`` or ``bwatch`` follows (R34); in three histories in ten the
  vendor rotates its log key once after its first ship (``vrotate``, R35);
- (hist40, a stream of its own again, drawn after every other) in half the histories (hist40:
  without the buyer's marking, the vendor's compromise or a sale back; since hist41 with them
  too), a lab buys one of the vendor's batches the buyer does not hold yet (hist41: in three
  in ten of those, one it holds) and trains on it (``lbuy``), the vendor revokes or erases
  it and the buyer applies the vendor's log past that (in seven in ten), the buyer's approver
  names the lab in its policy (``blab``) and imports the lab's checkpoint bundle (``lrelay``),
  then ``bwatch``, ``monitor`` or an update follows (in eight in ten) (R36).

`Model` says from the rules what each of the buyer's paths must answer. The rules (those of
test_histories_agree.py, R1 to R6, here with one signer per role, no successor policy at
the buyer and no clock), and the ones this module adds, numbered from R10 (R7 is
test_histories_agree.py's withdrawal of an approval):

- **R10 what the buyer knows** (docs/third-party.md "Updates between organisations", "What an
  import adds to your ledger"; DESIGN.md 5 "the ledger records what happened; a revocation
  is a record"): the buyer's ledger judges by what its own log holds. A vendor's revocation
  or erasure reaches it with the next import of the vendor's log extension (an update bundle
  or a bundle exported with ``--updates-since``), and from then on every decision refuses
  what it names and what the buyer built on it (R2 to R5, as for its own); until then the
  buyer's ledger still accepts it (the buyer learns of it by ``monitor`` or an update: the
  vendor's newest bundle, verified under the buyer's policy, already refuses it). An erasure
  taken in leaves a checkpoint sound and refuses a use now (R4), as a local one.
- **R11 held out across ledgers** (DESIGN.md 6 "The runner admits a dataset only if";
  SECURITY.md holdout22): a holdout dataset counts at the buyer once it is in the buyer's
  log (its own, or a vendor's it imported), and a train set whose batch is in it, or whose
  episodes are exact copies of a held-out batch's, is refused for a use now; a checkpoint is
  failed by membership only (a holdout recorded before it that names one of its batches):
  the verifiers do not read episodes. A held-out batch the vendor erased (its producer: the
  buyer's approvers did not) still refuses every use now, "cannot be checked" (SECURITY.md
  thirteenth round, lead: only an approver's erasure ends the comparison; R13), and so does
  one whose bytes that erasure deleted once the buyer's marking (R20) makes the erasure and
  the batch's record count for nothing (history 234: the bytes stay gone and no bundle of the
  batch imports under the marking; runner/admission.py names the holdout and the way on, an
  approver's ``erase`` of the batch; hist36). A vendor holdout whose record the buyer's
  marking (R20) distrusts holds out all the same, in the gate, the verifiers and ``dataset
  create`` alike (fail closed: verify/distrusted.py; hist34 finding 1, the lead's decision,
  hold35).

- **R12 evaluations and releases** (docs/evaluations.md "``trajledger eval``", "``trajledger
  release``"; the buyer's policy: an evaluator role and one ``[[release.require]]`` on
  ``suite@1``, a holdout of a vendor batch of its own, with a judge that passes every
  episode): an evaluation holds while its checkpoint (R5) and its suite's record (R3) do; a
  release holds while its checkpoint and the latest evaluation before it do. ``beval`` is
  done when the checkpoint and the suite hold and no batch of the suite is erased (the suite's
  data is read); ``brelease`` when the checkpoint and its latest evaluation hold.

- **R13 the buyer's own word** (DESIGN.md 5 "a revocation is a record", "erasure deletes
  blobs but keeps digests"; docs/cli.md "Withdrawing an approval"; SECURITY.md withdraw26,
  thirteenth round (lead)): the buyer's approver may revoke, erase or withdraw an approval of
  anything it holds, the vendor's too; each counts at once in the buyer's ledger as the
  vendor's does once taken in (R2 to R5, R7: a withdrawn approval counts for no use, before
  it too), never in the vendor's bundles. An erasure by the buyer's approver of a held-out
  batch ends the comparison with it (nothing left to compare: neither "cannot be checked"
  nor copies); its files stay deleted whatever is imported after (hist28 finding 1: the
  store's files of every batch erased here are checked).
- **R14 a vendor's approvals** (schemas/bundle.v1.md "Which members": a bundle carries what
  verifying its subject checks, and a dataset's record is verified without its approvals;
  keys/README.md ``publish``: an update carries revocations', erasures' and policies'
  envelopes only): a vendor's approval of its dataset never reaches the buyer with the
  dataset or an update (only a checkpoint's bundle carries approvals; the vendor trains
  nothing here but R31's), so it counts for nothing there although the buyer's policy names
  its approver, and its withdrawal changes nothing there; R31 for a checkpoint's bundle.
- **R15 a vendor's key compromise** (docs/third-party.md "Updates between organisations";
  SECURITY.md 5 "Which records stay valid"): from the successor on, the vendor cannot sign
  with ``vendor`` (every vendor step that would is refused); its newest bundles under the
  buyer's policy refuse what that key signed at or after ``compromised_since``; the buyer's
  import of the extension that carries the successor revokes each artifact it holds from the
  vendor that the key signed since (then R10 as for a revocation): from the vendor's log
  alone (updates.py ``_compromises``), not bytes the buyer recorded itself first (R34, hist40:
  listed as ignored; its own record and the vendor's then both hold, by name and by digest),
  nor a batch the lab's bundle brought here (R36, hist41: held from the vendor before or not;
  listed as ignored, ``NOTE: ignored: key compromise``, and the relay's import of a batch the
  key signed since, the successor taken in, names it: ``declares compromised``). A log's word
  stops only what it alone brought here (SECURITY.md rev4 finding 1: a policy may list
  anyone's key, and the buyer cannot tell the vendor's key from one the vendor lists).
- **R16 ``max_drop``** (docs/evaluations.md "``trajledger release``": "with ``max_drop`` and a
  parent checkpoint, the parent's latest evaluation on the same suite must exist"): in half the
  histories the buyer's policy also requires, per suite, the judge's ``score`` with
  ``max_drop = 0.2`` (`DROP`); a release of a checkpoint with a parent then also needs an
  evaluation of the parent recorded before it.
- **R17 more than one suite** (docs/evaluations.md "``trajledger release``": every
  requirement must be met; each evaluation is on one suite): in four histories in ten with
  those steps the buyer also requires ``suite2@1`` (a second holdout of a vendor batch of its
  own, made with the first); ``beval`` names either suite; a release needs, for each suite,
  the checkpoint's latest evaluation on it to hold (R12) and, with ``max_drop``, the parent's
  evaluation on that suite (R16); an evaluation holds while its own suite's record does.
- **R18 ``monitor``** (docs/third-party.md "Monitoring" step 5: "in a ledger that imported from
  that log, applies its new entries about what you hold", "Updates between organisations":
  "The next import or ``monitor`` must bring every entry from the size applied on"): the
  buyer's approver watching the vendor's served log (``log serve``'s envelopes) takes in what an
  update bundle of the same extension would (R10, R15), and the size applied moves on for
  either: a history may mix both.
- **R19 a real drop** (docs/evaluations.md "``trajledger release``": "the metric may be at most
  ``max_drop`` below it"; "``results.json``": a judge's ``metrics``): the judge scores a
  checkpoint 0.5 to 0.9 in tenths, a function of its files (`score_of`); a release of a
  checkpoint with a parent needs its score at most 0.2 below the parent's (a decimal rule:
  0.8 to 0.6 is 0.2, allowed), at release and in every verifier after.
- **R20 the buyer's own compromise marking** (docs/third-party.md "Updates between
  organisations": the report "tells you to add the key to your own policy's
  ``revoked_keys``"; schemas/SPEC.md "Which keys count for a record": "a signature by a key in
  its ``revoked_keys`` counts for nothing on a record logged at or after
  ``compromised_since``", "a revoked key may hold no role"; bundle.v1.md: an import logs the
  vendor's records in the buyer's log, so their index there is the buyer's): from the marking
  on, every vendor record logged here at or after its index counts for nothing: an artifact
  the vendor's key signed that an import at or after it brought fails (R2, R3, and what is
  built on it, R4, R5, R12), and so does a vendor's revocation or erasure taken in at or
  after it (what it named holds again, but a batch whose files it deleted fails as missing:
  hist32, and held out cannot be checked: R11, history 234); what was taken in before holds, and so
  does what the buyer's own approver signed (R13, R15's revocations), its erasure of a batch the
  vendor had erased too (it lists the blobs the vendor's deleted: hist33 finding 1). A vendor's
  bundle is refused under the buyer's policy in force (the successor, the one file a vendor's log
  does not carry: ``vendor`` holds no role in it), so every later ``ship`` is refused; an ``update``
  or ``monitor`` is done (the vendor's revocations ignored). The buyer's own bundles carry its
  policy history: verified under its first policy, the successor is followed, as in its ledger.
- **R21 contamination settings** (docs/audit-index.md "Refusing near duplicates", "Shared runs
  of steps"; docs/cli.md "Held-out data in a train set"; keys/README.md ``[contamination]``):
  the vendor's batches are 24-step episodes (`long_rollouts`), a copy an exact one, one cut
  (a shared run of 21 steps), or a near or far noisy one (`relation`); a train set holding a
  copy of a held-out batch at the buyer (R11: its own holdout, or the vendor's imported) is
  refused by ``dataset create`` (from what it can read: an erased held-out batch's bytes are
  gone) and by the gate (``admit``, ``train``) as the ``[contamination]`` of the buyer's
  policy in force says (`refused`): exact copies always, a shared run unless ``runs =
  "near"`` makes it near, a near one with ``refuse = "near"``, a far one only at a lowered
  ``numeric_threshold``; the buyer's approver changes it by a successor policy (``bcontam``,
  one of `RULES`), from its entry on (the verifiers read no episodes: a checkpoint is judged
  by membership only, R11, whatever the rules became). The vendor's policy does not bind the
  buyer: its gate is the vendor's (None here).
- **R22 sealed suites** (docs/evaluations.md "Sealed suites"; SECURITY.md 7): the vendor seals
  some batches, half of those of the buyer's suites, to its policy's evaluator
  ``encryption_keys``: the buyer's ``evaluator``'s X25519 key, not ``evaluator2``'s (both in
  the buyer's evaluator role). A sealed batch is never in a train set (``vdataset``,
  ``bdataset`` refused); ``beval`` by ``evaluator2`` on a suite with a sealed batch is refused
  (nothing unsealed, nothing logged), by ``evaluator`` done as R12 says, and a release over it
  as R12; the gate compares a sealed held-out batch by the fingerprints and sketches its
  record publishes, so an erasure of its blobs ends no comparison and a copy cut from it
  (a run of steps: none published) is not found (runner/admission.py ``_contamination``).
  One whose record does not count here (R20's marking) cannot be checked: every use now is
  refused until the buyer's approver erases it (hist32 finding 1).
- **R23 the vendor's suite** (docs/evaluations.md "``trajledger release``": the suite is "the
  first holdout or regression dataset of that name and version that this ledger recorded
  itself, not one another log brought by import", or the pinned ``digest``'s; SECURITY.md
  rev26; status.py ``_check_pinned_suites``): in three histories in ten the vendor ships a
  holdout it names ``suite@1`` (``vsuite``, of its batch ``v0``), and two evaluations in ten
  are on it (by digest); they count for no release until the buyer's approver pins its
  requirements on ``suite@1`` to it (``bpin``, in half of those; refused when its record does
  not verify here, judged under the policy it was signed under: hist32 finding 2; a marking
  R20 that makes the pinned suite fail is recorded, the pin kept: the lead, history 2062).
  The rules in force
  judge every release, those made before a successor too (SECURITY.md twelfth round, "a
  successor policy raising the bar"): a release cites the latest evaluations on its suites,
  and fails once a pin names another suite.
- **R24 ``[release]`` changed by a successor** (docs/evaluations.md "``trajledger release``":
  "The decision, which every verifier makes again"; SECURITY.md twelfth round, "a successor
  policy raising the bar"): the buyer's approver sets a successor with another ``[release]``
  (``brules``, one of `RELEASES`: ``max_drop`` of 0.1, 0.2 or 0.3 or none, a ``min`` of 0.7 on
  ``suite@1``'s score or none, ``suite2@1`` required or not, or no ``[release]`` at all: nothing
  is released under it); the rules in force judge every
  release, those signed before it too, in ``verify``, ``lineage``, ``impact`` and both
  verifiers of its bundle (R12, R16, R17, R19 as they now read): a release cites what the
  rules it was made under used (the parent's evaluations only under a ``max_drop``), and
  fails when the rules now need one it does not cite, or when one it cites fails, on a suite
  the rules no longer require too (its lineage: DESIGN.md 7; hist34, history 9007). The
  release of its own (``r91``, hist34: `released_again`) is of ``c91``, trained on the buyer's
  own batch ``b91`` (the suites too, ``b90``, ``b92``, if it holds none then), so no marking
  nor vendor compromise refuses it.
- **R25 the vendor's own ``[contamination]``** (docs/audit-index.md "Refusing near duplicates";
  keys/README.md ``[contamination]``; DESIGN.md 6): the vendor's approver sets its policy's
  ``[contamination]`` (``vcontam``, one of `RULES`); the vendor's ``dataset create`` refuses as
  the buyer's does (R11, R21, R22) from what the vendor holds (its holdouts: ``wh``, R23's
  ``vsuite`` and those it draws; a batch it erased skipped) under its own rules in force. The
  buyer, importing what the vendor made, is bound by its own rules only (R21): an import logs
  none of the vendor's policies at the buyer (its artifacts and their import records only),
  and a pin (R23) binds a release to a suite, not to the vendor's rules.
- **R26 the vendor's gate** (DESIGN.md 6 "The runner admits a dataset only if"; docs/cli.md
  "Held-out data in a train set"; docs/audit-index.md "Refusing near duplicates"; SECURITY.md
  5 "Which records stay valid"; runner/admission.py ``_contamination``): the vendor's trainer
  (``vtrainer``, in the vendor's policy) trains on a vendor train set (``vtrain``) and
  ``admit`` at the vendor decides as the buyer's gate does (R4, R7, R11, R21, R22) from the
  vendor's log under the vendor's policy in force (R25's ``[contamination]``): refused when
  its record or a batch's does not hold there (revoked; signed by ``vendor`` since its
  declared compromise, R15, whose revocations signed since count for nothing), it or a batch
  is erased, no approval of the vendor's approver stands (R14's, not withdrawn), a batch is in a
  vendor holdout (one whose record is signed since the compromise too: R11), a held-out batch
  the vendor erased is not sealed (its producer's erasure ends no comparison), a sealed one's
  record was signed since the compromise, or a batch is a copy of a held-out one its rules
  refuse. A vendor checkpoint verifies at the vendor while its dataset's record holds, an
  approval before it stands and no holdout before it holds one of its batches (R5, R11).
- **R27 the vendor buys back** (docs/third-party.md "What an import adds to your ledger",
  "Updates between organisations"; schemas/SPEC.md "Which keys count for a record",
  "Revocation authority"; DESIGN.md 6): the buyer exports one of its train sets (of the
  vendor's batches, of its own ``b91`` or of chat episodes: with ``--updates-since`` the
  buyer's log size the vendor applied) and the vendor imports it, signed by its approver
  (``bsell``). The import verifies the whole bundle under the vendor's policy in force: refused
  until that policy names the buyer's producer key and log (``vtrust``), and refused once the
  vendor declared ``vendor`` compromised when the bundle holds a record that key signed (the
  successor names ``vendor`` in no role, and a bundle is judged under one policy, not the
  vendor's history: as R20's ship after the buyer's marking); the buyer's own record failing
  there, either (its export may be refused). The vendor's batches in it stay the vendor's
  own (one record, its index, its revocations and erasures); the buyer's records are taken in
  and hold there. The buyer's approvals never travel with a dataset (R14 the other way), and
  its approver's revocations and erasures that a later sale's extension brings are ignored
  there (the vendor's policy names no approver of the buyer's): they neither refuse a set nor
  delete the vendor's files. The vendor's gate then judges a set bought back as R26 its own:
  its approver's approval, the vendor's revocations, erasures and compromise of its own
  batches in it, its holdouts (membership) and its ``[contamination]`` (copies, R21, R28); its
  ``dataset create`` counts a set bought back among its train sets (R25: a holdout of one of
  its batches is refused).
- **R28 chat episodes** (docs/recording.md "Chat rollouts"; docs/audit-index.md "The
  normalised text fingerprint", "Text episodes (threshold 0.8)"; docs/trainers.md ``train --
  COMMAND``): a vendor batch of chat episodes (`text_rollouts`) and its copies: exact, equal
  once normalised (case, white space, another system prompt: an exact duplicate too), or two
  words of each prompt replaced (a near duplicate, 0.89 to 0.93); held out at either party (a
  sealed one compared by the fingerprints and sketches its record publishes, R22), a train set
  of a copy is refused by ``dataset create`` and the gates as R11, R21, R25 and R26 say
  (``refused``: exact always, near with ``refuse = "near"``; no runs of steps in text), across
  both ledgers and back (R27). The built-in trainer learns from observations and actions only:
  a set of chat episodes is trained by a COMMAND (`SFT`), after the same gate.
- **R29 what the exporter disowns** (SECURITY.md, twentieth round, left35 finding 3; docs/
  AUDIT_FIRST_HOUR.md): an auditor's verifier (``verify BUNDLE``, ``python -m
  trajledger.verify``) of the vendor's newest bundle, under the buyer's policy that still holds
  ``vendor`` as producer, fails it when the bundle holds a record ``vendor`` signed at or after
  the ``compromised_since`` the vendor's own policy declares: besides R15's (an artifact or a
  revocation so signed), an erasure of the artifact or of one of its batches; an import judges
  the vendor's declarations itself (R15), so ``ship`` is as before.

- **R30 a vendor that names the buyer's approver** (schemas/SPEC.md "Revocation authority": a
  revocation or erasure counts when its signer is an approver; "The policy applied": the log's
  policies followed through their successors, so a record is judged under the policy in force
  at its index; docs/third-party.md "Updates between organisations"): once the vendor's policy
  names the buyer's approver (``vname``), that approver's revocations and erasures a sale brings
  into the vendor's log (R27: of the set's lineage, and the extension's since the size applied)
  count there: of the vendor's own batches and datasets and of what it bought back, refusing
  them at the vendor's gate and ``vapprove`` (R26) and deleting the vendor's files of a batch
  erased (an approver's erasure of a held-out batch then ends the vendor's comparison with it,
  as R13 at the buyer); one a sale brought before the naming still counts for nothing there.

- **R31 the vendor's checkpoints shipped** (schemas/bundle.v1.md "Which members": a
  checkpoint's bundle carries its dataset's approvals; docs/third-party.md "Updates between
  organisations", "What a buyer runs daily"; SECURITY.md, twenty-first round, out36): the
  vendor's checkpoint's bundle (``export CK`` with ``--updates-since`` the size applied) is
  refused by the buyer's ``import`` while the buyer's policy does not name the vendor's trainer
  key (``bvtrust``: its record's signer) and after the buyer's marking (R20: its dataset's and
  batches' records are ``vendor``'s) and when no approval of its dataset logged before it
  counts (withdrawn since: an import refuses a bundle failing for anything but a revocation);
  else done, its lineage revoked at the vendor (taken in as revoked) or revoked, erased or held
  out here alike (either after the vendor's compromise, or the buyer's approver's revocations
  in the vendor's log: `Model.carried`; hist38). It brings the
  dataset, its batches and the vendor's approvals of the dataset logged before the checkpoint
  and not withdrawn (its approver is an approver here, R14): the dataset is approved here from
  then on (``admit``), and the checkpoint holds at the buyer as the buyer's own would (R5, R11
  with the buyer's holdouts logged before its import: its index here is the import's), and so
  does a checkpoint fine-tuned from it (``--parent``, R5). The vendor's datasets recorded in the
  extension before the checkpoint travel with it (their envelopes: its held-out check reads
  them; hist37 finding 2). A withdrawal of such an approval,
  taken in by an update or a ``monitor`` (a revocation of an approval held here: hist37 finding
  1), counts here (R7): the checkpoint, its children and the dataset's admission fail. ``monitor
  --fail-on-revocation`` exits 1 when the extension since the size applied revokes or erases
  something the buyer holds, else 0 (either after the vendor's compromise, a sale back, or a
  withdrawal since: `Model.watched`), and takes it in either way. After the buyer's marking
  (R20) such a revocation or erasure counts for nothing here, and every update, ``monitor`` and
  ``bwatch`` that takes it in says so (out36: ``WARNING: not applied here: ORIGIN revoked its
  own …``, what is built on it and what to do: `unapplied`); ``bwatch`` exits 1 for it too.
- **R32 one checkpoint, two records** (docs/cli.md "When a name is wrong"; SECURITY.md,
  twenty-third round, hist38 finding 1; ``verify.claims``): the buyer's ``c1`` and the
  vendor's ``vc1`` trained on the same batches with the same trainer and seed are the same
  bytes, two checkpoint records here once ``vc1`` is shipped (history 91). A reference by
  digest judges every record of the bytes and fails if any fails (``verify``, ``lineage``,
  ``impact``, the bundles, what records the digest: ``--parent``, an evaluation, a release,
  R5, R12); by name (``verify NAME@1``, and ``lineage NAME@1`` when the bytes have two
  records) the record of that name alone (`Model.checkpoint_ok` with ``named``).
- **R33 a second revocation by the same key** (docs/cli.md "Withdrawing an approval";
  SECURITY.md, twenty-third round, hist38 finding 2): ``vrevoke`` of what the vendor revoked
  already, and ``brevoke`` of what the buyer's approver revoked already, are done and record
  nothing (``revoked already by KEY``): one record, so a ``bwatch`` after the first was taken
  in exits 0 whatever the clock (history 117: it exited 1 or 0 by whether the second was
  signed in the same second as the first).

- **R34 a dataset or a batch, two records** (docs/cli.md "When a name is wrong"; SECURITY.md,
  twenty-fourth round, hist39 finding 1; ``verify.claims``, ``verify.retractions``): R32 for
  the other kinds. The buyer's own record of the vendor's bytes (``bsame``) and the vendor's,
  once an import brings it (`Art.second`), are two records of one digest. By digest (``verify
  DIGEST``, ``admit``, ``train``, a dataset's batch, the bundles) every record is judged: the
  vendor's revocation or erasure counts once its record is here (a producer's of any record
  of the bytes), not before (no authority over the buyer's own: ignored, and ``bwatch`` exits
  0 for it); by name (``verify NAME``: the buyer's own, the first of the name here) the
  buyer's record alone, whose files the vendor's erasure deleted all the same (missing).
- **R35 the vendor's log key rotated** (docs/third-party.md "Updates between organisations";
  SECURITY.md redo15): the vendor's ``log rotate-key`` between ships changes no decision: the
  buyer's policy names the old key, and every bundle, update and ``monitor`` (served under
  the new key) carries the handover the buyer follows; the size applied (and R36's mark)
  follows a verified handover (rot40 finding 1: the old key's tree proven a prefix of the new
  key's), so a ``monitor`` after it reads on from the size applied: ``bwatch`` exits 1 for a
  revocation or erasure signed since, 0 for one taken in before (hist41: `Model.watched`
  said either there while hist39 finding 6 was open; seed 1392 on 2af7bb98: exit 1).
- **R36 a lab's relay** (docs/third-party.md "Updates between organisations": "A record can
  also reach you after you applied … its origin's log"; SECURITY.md, twenty-fourth round,
  gap39): the lab's checkpoint bundle (``lrelay``) is imported once the buyer's policy names
  the lab's producer, approver and trainer keys and its log (``blab``), and brings the lab's
  train set ``l1`` (approved by the lab's approver: it counts here, ``admit``), ``lc1`` and
  the vendor's batch. When the buyer did not hold that batch (having applied some of the
  vendor's log: the step waits for it) the import marks the vendor's log unread (``WARNING:
  log … has not been read for …``; an update since the size applied is refused) and takes
  in none of the vendor's stops: a revocation or erasure of the batch the vendor logged
  before the size applied, passed over then, is not known here, and ``lc1`` holds. While
  marked, the vendor's log is read from its first entry (`Model.since`): the next
  ``monitor`` takes in every stop of what the buyer holds, ``bwatch`` exits 1 for any (a
  stop taken in before counts again: hist39 finding 3), and an update, ship or ``vckship``
  is exported with ``--updates-since 0``; a read clears the mark. After the vendor rotated its
  log key (R35) the refused update's line says why as without it (``where it must be read
  from again``: hist40 finding 5, fixed at the twenty-fifth round's merge; seed 1625).
  hist41: with the buyer's marking (R20: the lab's bundle holds the vendor's record, which
  the policy in force refuses, so ``lrelay`` is refused after it; before it, what the relay
  brought fails from the marking's index on as any vendor record), the vendor's compromise
  (R15: what the relay brought is not revoked for it) and a sale back; and in three in ten a
  relay of a batch the buyer holds already from the vendor. hist42 (vend41 finding 2): that one
  marks the vendor's log unread too, for ``l1`` and ``lc1``: the vendor's approver, an approver
  here (R14), signed the vendor's policies, which every read of its log takes in, so the log's
  keys hold an approver here, and it is marked for every record another log brings.
- **R37 a suite against the training data** (docs/evaluations.md; SECURITY.md, thirty-first
  round, evalc46): ``beval`` compares the suite's episodes, unsealed, with every batch the
  checkpoint and its parents were trained on whose bytes are here, as R21 compares a holdout
  with a train set but by runs of steps for a sealed suite too (the evaluator holds its
  plaintext), under the rules in force: a copy they refuse refuses the evaluation (nothing
  recorded but the unsealing); a train batch whose bytes are gone here is not compared.

Write side: ``vdataset`` as R25 says; ``bdataset`` of a holdout is refused when a train set
here holds one of its batches or a copy R21 refuses (either when one of its batches is erased
here); of a train set, refused when it holds a sealed or held-out batch or a copy R21 refuses,
else done; ``bapprove`` is done when the dataset's record holds (R3 with R10); ``btrain`` as
the gate (R4 with R10, R11) and its parent (R5); an ``update`` is done whenever the buyer has
applied some of the vendor's log, and so is a ``monitor``; a ``ship`` of what holds at the
vendor is done (one of something revoked there may be refused: then nothing changes at the
buyer), and refused after the buyer's marking (R20); ``vtrain`` as R26, and ``bown``,
``bownsuite`` always; ``bsell`` as R27 (skipped when a batch of the set is erased at the
buyer), ``vtrust``, ``vname`` and ``bvtrust`` always; ``vckship`` and ``bwatch`` as R31;
``bsame`` of a batch always (before the vendor's record is here), of a train set as
``bdataset``; ``vrotate`` always; ``lbuy`` and ``blab`` always, ``lrelay`` as R36 and R20 (R34 with
R15 and a sale back: ``bsell`` of a set holding a batch the buyer recorded itself after the
vendor's compromise is either, the bundle holding its record or the vendor's).

The paths (`judge_history`): per imported batch ``verify`` and its node in ``impact``; per
dataset at the buyer ``verify DS``, ``admit``, ``export`` then ``verify BUNDLE --policy
BUYER`` and ``python -m trajledger.verify BUNDLE --policy BUYER``; per checkpoint ``verify``,
``lineage``, its node in ``impact`` of its dataset's first batch and its bundle's two
verifiers; per evaluation ``verify``, ``lineage`` and its node in ``impact CK``; per
release the same and its bundle's two verifiers; and per vendor artifact the vendor's
newest bundle (``export REF`` at the vendor) verified under the buyer's policy (in force:
R20) by both verifiers (R2/R3 with all the vendor knows); per vendor dataset, and per
dataset it bought back (R27), ``admit`` at the vendor, and per vendor checkpoint ``verify``
there (R26).

Size (hist42): CI runs `CI_SEEDS` (15, 16) and `CI_EXTRA` (376: 331 left out, its compromise
the hand history of R15 at the buyer with R17), 3 histories, and twenty-two built by hand
(hist37 finding 2's history is R31's fine-tune test's now), each history on a copy of parties
built once per process (`PARTIES`): the file 48.4 CPU-s (40.1 s user, 8.4 s system, ``-n 0``,
one pair of whole-process runs taken in turn, at load 14 falling to 7) against 350977cf's
55.2 (45.9, 9.3) in the same run (0.88 x). Before it: CI ran `CI_SEEDS` as agree26 chose them
(two of its six, without the steps of R13 to R25) and `CI_EXTRA` with hist30's (R13 to R20): 4
histories, and twenty-two built by hand (R12, R19 with R24, R20, R21 to R23, R25, a sealed batch
erased, R26, R27 with R28, R30, R31 with hist37's two findings and out36's warning, hist32's,
the lead's, hist33's, hist34's and history 234's findings, R36 with R34's by-name line, and R36
with R35: hist40 finding 5 and, since hist41, ``bwatch`` after the rotation), and one strict
xfail
(R15 with R36, hist41 finding 2): the file 55.7 CPU-s (47.2 s user, 8.6 s system,
``-n 0``, medians of two
``farm-bench`` pairs of whole-process runs, at load 13 to 21, beside five other sessions'
work) against 9ed7ee20's 53.8 (45.6, 8.2) in the same run (hist41: +1.9 CPU-s, 1.03 x, the
xfail's history with the lab and three steps more in R35's); before it, without hist40's
xfail, 52.6 CPU-s (44.5 s user, 8.1 s system,
``-n 0``, medians of two pairs of whole-process runs, at load 13 to 20, beside five other
sessions' work) against 2af7bb98's 51.1 (42.9, 8.2) in the same run (hist40: +1.5 CPU-s, 1.03
x, R36's hand history: a third ledger, the lab; the xfail, a shorter history, about as much
again); hist37's three, as a process at
load 11: 5.3 CPU-s (4.6 s user, 0.7 s
system, with pytest's start; R30's alone so: 2.9); the file 34.4 CPU-s (30.0 s user, 4.5 s
system, ``-n 0``, medians of two ``farm-bench`` pairs, at load 13 to 14) against 62f580e6's
32.4 (28.1, 4.3) in the same run (hist36: +2.0 CPU-s, 1.06 x, the hand histories of history 234
and R30); before it, 30.4 CPU-s (26.4 s user, 4.1 s system, ``-n 0``, medians of three, at load
12 to 15) against bc3060a's 26.9 (23.4, 3.5) in the same run (hist35, ``farm-bench`` pairs:
+3.5 CPU-s, the hand history R27 with R28); hold35's hand test of R11 turned round 3.05 CPU-s
against hist34's 2.20 (the test alone as a process, medians of three, load 12 to 14: a
checkpoint more, a bundle's verifiers and `judge_history`); ``TRAJLEDGER_EXCHANGE_N=200`` runs
seeds 0 to 199, ``TRAJLEDGER_EXCHANGE_SEED=S`` seed S alone, each with those steps
(``TRAJLEDGER_EXCHANGE_OWN=0``: the buyer's own steps and the vendor's approvals left out).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_histories_agree import Step, impact_verdict
from test_paths_agree import first_problem
from test_updates import BUYER_POLICY, make_buyer, rollouts
from testkit import Party

from trajledger.ledger import status
from trajledger.ledger.status import pins_it_breaks

# -- the parties ---------------------------------------------------------------------------------


class Side(Party):
    """A party whose commands may fail: `cli` returns the result whatever its exit code.

    Its `size` is read (``log info``) once after each of its commands: only its own commands
    write its ledger, and the steps ask it about 800 times a run of this module, each a command
    opening the ledger (ci55)."""

    def __init__(self, root: Path, name: str) -> None:
        super().__init__(root, name)
        self.root = root
        self.problems: list[str] = []
        self.known_size: int | None = None

    @classmethod
    def at(cls, root: Path, name: str) -> Side:
        """The party ``name`` whose ledger and user state are at ``root`` already (a copy)."""
        side = cls.__new__(cls)
        side.name, side.home, side.state = name, root / name, root / f"{name}-state"
        side.root, side.problems, side.known_size = root, [], None
        return side

    def size(self) -> int:
        if self.known_size is None:
            self.known_size = super().size()
        return self.known_size

    def run(self, *args: str | Path, code: int = 0) -> Any:
        self.known_size = None
        return super().run(*args, code=code)

    def cli(self, *args: str | Path) -> Any:
        from testkit import new_runner

        from trajledger.runner.cli import main

        self.known_size = None
        r = new_runner().invoke(main, ["--ledger", str(self.home), *map(str, args)],
                                env={"TRAJLEDGER_STATE_DIR": str(self.state)})
        if r.exit_code not in (0, 1) or "Traceback" in r.output:
            self.problems.append(f"{self.name} {' '.join(map(str, args))}: exit "
                                 f"{r.exit_code}\n{r.output[-600:]}")
        return r


RELEASE = """\
[roles.evaluator]
keys = ["keys/evaluator.pub", "keys/evaluator2.pub"]
[release]
approvals = 1
[[release.require]]
suite = "suite@1"
metric = "success_rate"
min = 0.5
"""
"""The buyer's evaluator and release rules (docs/evaluations.md): one evaluation on the
buyer's suite ``suite@1`` with a success rate of at least a half; two evaluator keys (R22)."""

JUDGE = """\
import hashlib, json, os, pathlib, sys
suite = pathlib.Path(os.environ["TRAJLEDGER_SUITE_DIR"])
out = pathlib.Path(os.environ["TRAJLEDGER_OUTPUT_DIR"])
noted = pathlib.Path(sys.argv[0]).with_name("episode-ids.json")
known, new = json.loads(noted.read_text()) if noted.is_file() else {}, {}
episodes = []
for batch in json.loads((suite / "manifest.json").read_text())["batches"]:
    path = suite / batch["directory"] / "episodes.parquet"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    ids = known.get(digest)
    if ids is None:  # (from the path: Arrow's threads on a Python file abort at exit)
        import pyarrow.parquet as pq
        ids = new[digest] = pq.read_table(path, columns=["episode_id"]).column(
            "episode_id").to_pylist()
    episodes += [{"batch": batch["digest"], "episode_id": e, "passed": True} for e in ids]
if new:
    pathlib.Path(f"{noted}.tmp").write_text(json.dumps({**known, **new}))
    os.replace(f"{noted}.tmp", noted)
files = sorted(hashlib.sha256(p.read_bytes()).hexdigest()
               for p in pathlib.Path(os.environ["TRAJLEDGER_CHECKPOINT_DIR"]).rglob("*")
               if p.is_file())
salted = pathlib.Path(sys.argv[0]).with_name("score-salt")
salt = salted.read_text() if salted.is_file() else ""
score = (5 + int(hashlib.sha256((salt + " ".join(files)).encode()).hexdigest(), 16) % 5) / 10
(out / "results.json").write_text(json.dumps(
    {"format": "trajledger.eval-results/1", "episodes": episodes,
     "metrics": {"score": score}}))
"""
"""A judge that passes every episode of the suite (docs/evaluations.md's, simplified), and
scores the checkpoint: ``score`` in tenths from 0.5 to 0.9, a function of its files' bytes
and of the ``score-salt`` beside it, if any (`score_of`: R19). The episode ids of an
episodes.parquet it read with pyarrow are noted beside it (``episode-ids.json``) by the file's
SHA-256, and taken from there when the same bytes come again (the history's next evaluation of
that suite): pyarrow's import is 0.2 CPU-s of each judge that needs it (suite44, as suite42's
`test_evaluations.note_episode_ids`)."""


DROP = """\
[[release.require]]
suite = "suite@1"
metric = "score"
max_drop = 0.2
"""
"""The requirement with a real drop (R16, R19): the judge's ``score`` at most 0.2 below the
parent checkpoint's."""


def release_text(max_drop: bool | int | None, suites: tuple[str, ...],
                 least: int | None = None) -> str:
    """`RELEASE`, with one requirement per suite (R17) and, with ``max_drop``, a `DROP`
    requirement per suite (R16, R19: ``True`` for 0.2, or an int in tenths: R24), and with
    ``least`` (in tenths) a ``min`` on ``suite@1``'s ``score`` (R24: in its `DROP`
    requirement if any, a metric being required once a suite)."""
    drop = 2 if max_drop is True else max_drop or None
    least_text = "" if least is None else f"min = 0.{least}\n"
    if not suites:  # R24: no [release]
        return RELEASE[:RELEASE.index("[release]")]
    return RELEASE + "".join(
        RELEASE[RELEASE.index("[[release.require]]"):].replace("suite@1", f"{x}@1")
        for x in suites[1:]) + "".join(
        DROP.replace("suite@1", f"{x}@1").replace("0.2", f"0.{drop}") + least_text * (x == "suite")
        for x in suites if drop) + (
        DROP.replace("max_drop = 0.2\n", least_text) if least_text and not drop else "")


PARTIES: dict[tuple[bool, tuple[str, ...]], Path] = {}
"""hist42: the parties of `build_parties` built once per process for each ``max_drop`` and
``suites`` (in `PARTIES_DIR`), each history a copy: 0.15 to 0.2 CPU-s a history (with the lab),
a history of the CI run a fifth of its set-up. Copies share their keys and logs' keys, as the
histories of one seed's minimiser always did not: no rule reads a key's newness, and each
history keeps its own ledgers and user states."""
PARTIES_DIR: list[Path] = []
"""Where `PARTIES` are built: the module fixture's directory (`_parties_dir`); a temporary
one of its own for another module's tests (test_revoked_again.py's and others' call
`run_history`) and outside pytest."""


def make_parties(root: Path, max_drop: bool = False, suites: tuple[str, ...] = ("suite",)
                 ) -> tuple[Side, Side]:
    """The vendor and the buyer of `build_parties` at ``root``: a copy of `PARTIES`' (the
    lab's too: `relay` copies it from ``root / "lab-template"`` while the vendor's log key is
    the one it names)."""
    import atexit
    import tempfile

    from testkit import release_files

    key = (bool(max_drop), tuple(suites))
    if key not in PARTIES:
        if not PARTIES_DIR:  # (another module's test, a script: removed at the process's end)
            PARTIES_DIR.append(Path(tempfile.mkdtemp(prefix="trajledger-parties-")))
            atexit.register(shutil.rmtree, PARTIES_DIR[0], ignore_errors=True)
        built = PARTIES_DIR[0] / f"parties-{len(PARTIES)}"
        built.mkdir()
        vendor, _buyer = build_parties(built, *key)
        make_buyer(Side(built, "lab"), [vendor], origin="lab.example/log")
        release_files(built)  # (its SQLite connections closed: each copy whole)
        PARTIES[key] = built
    for name in ("vendor", "buyer", "lab"):
        shutil.copytree(PARTIES[key] / name, root / (name if name != "lab" else "lab-template"))
        shutil.copytree(PARTIES[key] / f"{name}-state",
                        root / f"{name if name != 'lab' else 'lab-template'}-state")
    shutil.copy(PARTIES[key] / "judge.py", root / "judge.py")
    return Side.at(root, "vendor"), Side.at(root, "buyer")


def build_parties(root: Path, max_drop: bool = False, suites: tuple[str, ...] = ("suite",)
                  ) -> tuple[Side, Side]:
    vendor = Side(root, "vendor")
    vendor.run("init", "--origin", "vendor.example/log")
    for k in ("vendor", "vapprover", "vevaluator", "vtrainer"):
        vendor.run("key", "new", k, "--no-encrypt")
    vendor.run("policy", "init", "--producer", "vendor", "--approver", "vapprover",  # R26
               "--trainer", "vtrainer", "--out", vendor.home / "policy.toml")
    buyer = Side(root, "buyer")
    # R14: the buyer's policy names the vendor's approver too (inline), threshold 1.
    pem = (vendor.home / "keys" / "vapprover.pub").read_text()
    text = BUYER_POLICY.replace('keys = ["keys/approver.pub"]',
                                f'keys = ["keys/approver.pub", """{pem}"""]')
    assert text != BUYER_POLICY
    make_buyer(buyer, [vendor], "format = 2\n" + text + release_text(max_drop, suites),
               evaluator=True, keys=("evaluator2",))
    # R22: the vendor seals to its evaluator role's encryption key, the buyer's evaluator's
    # X25519 key (not evaluator2's); the buyer made both.
    for k in ("evaluator", "evaluator2"):
        buyer.run("key", "new", k, "--alg", "x25519", "--no-encrypt")
    sealing, signing = (p.read_text() for p in (buyer.home / "keys" / "x25519" / "evaluator.pub",
                                                 vendor.home / "keys" / "vevaluator.pub"))
    path = vendor.home / "policy.toml"
    path.write_text(f'format = 2\n{path.read_text()}\n[roles.evaluator]\nkeys = ["""{signing}"""]'
                    f'\nencryption_keys = ["""{sealing}"""]\n')
    vendor.run("policy", "set", path, "--key", "vapprover", "--yes")
    vendor.run("env", "register", "grid", "--version", "1", "--source", "sim", "--key", "vendor")
    (root / "judge.py").write_text(JUDGE)
    return vendor, buyer


NAMES = {"vsuite": "suite"}
"""R23: the vendor's dataset ``vsuite`` is named ``suite``, as the buyer's suite."""
NOISE = {"orig": 0.0, "n1": 0.06, "n2": 0.3}
"""R21: the noise `long_rollouts` adds to a variant's observations, times one draw of
``data``'s."""


def long_rollouts(path: Path, data: int, tag: str, variant: str) -> Path:
    """R21: four episodes of 24 steps drawn from ``data`` (observations, actions and rewards:
    unrelated episodes at cosine below 0.45), their ids of ``tag``, as ``variant`` says
    (`VARIANTS`): ``orig`` as drawn; ``cut`` without their first 3 steps (a run of 21 steps
    shared with ``orig``: an exact finding, a near one under ``runs = "near"``); ``n1`` and
    ``n2`` with `NOISE` times one draw added to the observations (measured: ``n1`` at cosine
    0.996 to 0.999 of ``orig``, a near duplicate; ``n2`` at 0.95 to 0.983 of ``orig``, near
    at ``numeric_threshold = 0.9`` only, and so of ``n1``; no run shared)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(data)
    obs, act, rew = (rng.normal(size=(4, 24, 4)), rng.integers(0, 2, size=(4, 24)),
                     rng.normal(size=(4, 24)))
    obs = obs + NOISE.get(variant, 0) * np.random.default_rng([data, 1]).normal(size=obs.shape)
    first = 3 if variant == "cut" else 0
    rows = [(f"ep-{tag}-{e}", t - first, [float(x) for x in obs[e, t]], [float(act[e, t])],
             float(rew[e, t]), t == 23, False) for e in range(4) for t in range(first, 24)]
    names = ("episode_id", "step", "obs", "action", "reward", "terminated", "truncated")
    columns = zip(*rows, strict=True)
    pq.write_table(pa.table({k: list(c) for k, c in zip(names, columns, strict=True)}), path)
    return path


WORDS = ("river", "stone", "light", "garden", "window", "paper", "market", "table", "orange",
         "silver", "winter", "engine", "planet", "bridge", "forest", "letter", "mirror",
         "basket", "candle", "doctor", "island", "kitchen", "ladder", "motor", "needle", "ocean",
         "pencil", "rabbit", "saddle", "ticket", "valley", "wagon", "yellow", "anchor", "butter",
         "castle", "desert", "feather", "guitar", "hammer", "jacket", "kettle", "lemon",
         "magnet", "napkin", "pepper", "quilt", "rocket", "shadow", "tunnel", "violin", "walnut")
"""R28: the words of `text_rollouts`' prompts."""


def text_rollouts(path: Path, data: int, tag: str, variant: str) -> Path:
    """R28 (hist35): four chat episodes (docs/recording.md "Chat rollouts": a system prompt, a
    user's prompt of 30 words drawn from `WORDS` by ``data``, the assistant's answer with a
    reward), their ids of ``tag``, as ``variant`` says (`TEXT_VARIANTS`): ``t-orig`` as drawn;
    ``t-norm`` the same conversation upper-cased, its white space doubled and another system
    prompt (an equal normalised text fingerprint: an exact duplicate, docs/audit-index.md "The
    normalised text fingerprint"); ``t-edit`` with two words of each prompt replaced (a near
    duplicate of ``t-orig`` and ``t-norm`` at the text threshold 0.8: measured 0.89 to 0.93)."""
    rnd = random.Random(data)
    lines = []
    for e in range(4):
        words = [rnd.choice(WORDS) for _ in range(30)]
        answer = " ".join(rnd.choice(WORDS) for _ in range(5))
        if variant == "t-edit":
            words[7], words[21] = "zebra", "quartz"
        system, prompt = "Answer in five words.", " ".join(words)
        if variant == "t-norm":
            system, prompt, answer = ("You are terse.", prompt.upper().replace(" ", "  "),
                                      answer.upper())
        lines.append(json.dumps({"episode_id": f"ep-{tag}-{e}", "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": prompt},
            {"role": "assistant", "content": answer, "reward": 1.0}]}) + "\n")
    path.write_text("".join(lines))
    return path


# -- histories -----------------------------------------------------------------------------------


def generate(seed: int, extra: bool = True, new: bool = True) -> list[Step]:
    """9 to 16 steps, leaning to what the rules allow (a ship before the buyer's steps, an
    approval before training); labels: vendor batches ``v1``..., vendor datasets ``w1``...,
    buyer datasets ``d1``..., checkpoints ``c1``...; ``extra`` False: without the steps of
    the streams of their own (R13 to R23), agree26's history of ``seed``; ``new`` False:
    without hist32's (R21 to R23), hist30's history of ``seed``."""
    new = new and extra
    rnd, own = random.Random(seed), random.Random(f"own {seed}")
    vend, vapproved = random.Random(f"vendor approvals {seed}"), list[str]()
    compromise, own_p, comp_p = False, OWN if extra else 0, COMPROMISE if extra else 0
    steps: list[Step] = []
    # R21, R22 (hist32): streams of their own; the vendor's batches are of 24-step episodes.
    contam, seal, variants = random.Random(f"copies {seed}"), random.Random(f"sealed {seed}"), {}

    def vrecord(label: str, copy: int = 0, sealed: float = SEALED) -> Step:
        if not new:
            return Step("vrecord", (label, copy))
        variants[label] = contam.choice([variants[f"v{copy}"], *VARIANTS[1:]]) if copy else "orig"
        return Step("vrecord", (label, copy, variants[label], seal.random() < sealed))

    def beval(label: str, ck: str, *on: str) -> Step:
        if not new:
            return Step("beval", (label, ck, *on))
        on = on or ("vsuite" if pin.random() < ON_VSUITE else "suite",)  # R23
        return Step("beval", (label, ck, *on, "evaluator2" if seal.random() < OTHER else
                              "evaluator"))

    pin = random.Random(f"pin {seed}")

    policy = random.Random(f"policy {seed}")
    drop = extra and policy.random() < MAX_DROP  # R16, R19
    if drop:
        steps.append(Step("max_drop"))
    parents: dict[str, str | None] = {}
    two = extra and policy.random() < TWO_SUITES  # R17
    if two:
        steps.append(Step("two_suites"))
    n = {"v": 0, "w": 0, "d": 0, "c": 0, "e": 0, "r": 0}
    shipped: list[str] = []
    approved: list[str] = []
    suite, evaluated = False, []
    members_of: dict[str, list[str]] = {}
    at_buyer: set[str] = set()
    """Batch labels shipped (alone or in a dataset): the buyer's datasets lean to them."""
    train: dict[str, bool] = {}
    for _ in range(rnd.randint(9, 16)):
        w: dict[str, float] = {"vrecord": 0.8 if n["v"] > 1 else 9}
        if n["v"]:
            w.update({"vdataset": 1, "ship": 3 if not shipped else 1, "vrevoke": 0.7,
                      "verase": 0.4})
        if shipped:
            w.update({"update": 1.2, "bdataset": 2 if n["d"] < 2 else 0.7,
                      "bapprove": 3 if not approved else 1, "btrain": 6 if approved else 0.3})
            w.update({"bsuite": 0 if suite else 2})
        if n["c"] and suite:
            w.update({"beval": 3, "brelease": 3 if evaluated else 0})
        op = rnd.choices(list(w), list(w.values()))[0]
        if shipped and own.random() < own_p:  # R13: the buyer's own word on what it holds
            steps.append(own_step(own, sorted(at_buyer), approved, n["d"]))
        if n["v"] and not compromise and vend.random() < comp_p:  # R15
            compromise = True
            pool = [f"v{i}" for i in range(1, n["v"] + 1)] + [f"w{i}" for i in range(1, n["w"] + 1)]
            steps.append(Step("vcompromise", (vend.choice([*pool, None]),)))
        if n["w"] and vend.random() < own_p:  # R14: the vendor's approver (its own stream)
            if vapproved and vend.random() < 0.4:
                steps.append(Step("vwithdraw", (vend.choice(vapproved),)))
            else:
                vapproved.append(f"w{vend.randint(1, n['w'])}")
                approved.append(vapproved[-1])
                steps.append(Step("vapprove", (vapproved[-1],)))
        if op == "vrecord":
            n["v"] += 1
            copy = rnd.randint(1, n["v"] - 1) if n["v"] > 1 and rnd.random() < 0.25 else 0
            steps.append(vrecord(f"v{n['v']}", copy))
        elif op == "vdataset":
            n["w"] += 1
            members = sorted({f"v{rnd.randint(1, n['v'])}" for _ in range(rnd.randint(1, 2))})
            split = "holdout" if rnd.random() < 0.25 else "train"
            steps.append(Step(op, (f"w{n['w']}", tuple(members), split)))
            members_of[f"w{n['w']}"] = members
            train[f"w{n['w']}"] = split == "train"
        elif op == "ship":
            pool = [f"v{i}" for i in range(1, n["v"] + 1)] + \
                [f"w{i}" for i in range(1, n["w"] + 1)] * 2
            shipped.append(rnd.choice(pool))
            steps.append(Step(op, (shipped[-1],)))
            at_buyer.update(members_of.get(shipped[-1], [shipped[-1]]))
        elif op == "vrevoke":
            pool = [f"v{i}" for i in range(1, n["v"] + 1)] + [f"w{i}" for i in range(1, n["w"] + 1)]
            steps.append(Step(op, (rnd.choice(pool),)))
        elif op == "verase":
            steps.append(Step(op, (f"v{rnd.randint(1, n['v'])}",)))
        elif op == "update":
            steps.append(Step(op))
        elif op == "bdataset":
            n["d"] += 1
            pool = sorted(at_buyer) if at_buyer and rnd.random() < 0.9 else [
                f"v{i}" for i in range(1, n["v"] + 1)]
            members = sorted({rnd.choice(pool) for _ in range(rnd.randint(1, 2))})
            split = "holdout" if rnd.random() < 0.2 else "train"
            steps.append(Step(op, (f"d{n['d']}", tuple(members), split)))
            train[f"d{n['d']}"] = split == "train"
        elif op == "bsuite":
            suite = True
            n["v"] += 1  # a batch of its own (one in a train set cannot be held out)
            steps += [vrecord(f"v{n['v']}", sealed=SEALED_SUITE), Step("ship", (f"v{n['v']}",)),
                      Step("bdataset", ("suite", (f"v{n['v']}",), "holdout"))]
            if two:
                n["v"] += 1
                steps += [vrecord(f"v{n['v']}", sealed=SEALED_SUITE), *suite2(n["v"])[1:]]
        elif op == "beval":
            n["e"] += 1
            evaluated.append(f"c{rnd.randint(max(1, n['c'] - 1), n['c'])}")
            on = (rnd.choice(["suite", "suite2"]),) if two else ()
            steps.append(beval(f"e{n['e']}", evaluated[-1], *on))
        elif op == "brelease":
            n["r"] += 1
            steps.append(Step(op, (f"r{n['r']}", rnd.choice(evaluated))))
        elif op == "bapprove":
            pool = [f"d{i}" for i in range(1, n["d"] + 1)] + [s for s in shipped if s[0] == "w"]
            pool = [x for x in pool if train[x]] or pool  # lean to train sets
            if pool:
                approved.append(rnd.choice(pool))
                steps.append(Step(op, (approved[-1],)))
        else:
            pool = approved if approved and rnd.random() < 0.85 else (
                [f"d{i}" for i in range(1, n["d"] + 1)] + [s for s in shipped if s[0] == "w"])
            if pool:
                n["c"] += 1
                parent = f"c{rnd.randint(1, n['c'] - 1)}" if n["c"] > 1 and \
                    rnd.random() < 0.4 else None
                steps.append(Step(op, (f"c{n['c']}", rnd.choice(pool), parent)))
                parents[f"c{n['c']}"] = parent
    if n["c"] and rnd.random() < 0.9:  # the loop's end: evaluate, release, then a vendor's word
        if not suite:
            n["v"] += 1
            steps += [vrecord(f"v{n['v']}", sealed=SEALED_SUITE), Step("ship", (f"v{n['v']}",)),
                      Step("bdataset", ("suite", (f"v{n['v']}",), "holdout"))]
            if two:
                n["v"] += 1
                steps += [vrecord(f"v{n['v']}", sealed=SEALED_SUITE), *suite2(n["v"])[1:]]
        ck = f"c{rnd.randint(1, n['c'])}"
        for c in ([parents[ck]] if drop and parents.get(ck) else []) + [ck]:  # R19: both
            n["e"] += 1
            steps += [beval(f"e{n['e']}", c)]
            if two:
                n["e"] += 1
                steps += [beval(f"e{n['e']}", c, "suite2")]
        steps += [Step("brelease", (f"r{n['r'] + 1}", ck))]
        if rnd.random() < 0.6:
            pool = [f"v{i}" for i in range(1, n["v"] + 1)] + [f"w{i}" for i in range(1, n["w"] + 1)]
            steps.append(Step(rnd.choice(["vrevoke", "vrevoke", "verase"]), (rnd.choice(pool),)))
            if rnd.random() < 0.7:
                steps.append(Step("update"))
    if shipped and own.random() < own_p:
        steps.append(own_step(own, sorted(at_buyer), approved, n["d"]))
    mark = random.Random(f"mark {seed}")  # R20: the buyer marks the vendor's key, once at most
    if extra and shipped and mark.random() < MARK:
        first = next(i for i, s in enumerate(steps) if s.op == "ship")
        at = mark.randint(first + 1, len(steps))
        pool = [s.args[0] for s in steps[:at] if s.op == "ship"]
        steps.insert(at, Step("bmark", (mark.choice([*pool, None]),)))
    if new and pin.random() < VSUITE:  # R23: the vendor's dataset named like the buyer's suite
        at = pin.randint(0, len(steps))
        steps[at:at] = [vrecord("v0", sealed=SEALED_SUITE),
                        Step("vdataset", ("vsuite", ("v0",), "holdout")), Step("ship", ("vsuite",))]
        if pin.random() < PIN:
            steps.insert(pin.randint(at + 3, len(steps)), Step("bpin"))
    rules = random.Random(f"contamination rules {seed}")  # R21: the buyer's [contamination]
    if new and shipped and rules.random() < RULED:
        for _ in range(rules.choice([1, 1, 2])):
            at = rules.randint(1, len(steps))
            steps.insert(at, Step("bcontam", (rules.randrange(len(RULES)),)))
    bar = random.Random(f"release rules {seed}")  # R24: the buyer's [release] changed
    trained = [i for i, s in enumerate(steps) if s.op == "btrain"]
    reached = new and shipped and bar.random() < RAISED
    if reached:
        for k in range(bar.choice([0, 1]) if trained else 0):
            at = bar.randint(trained[0] + 1, len(steps))
            steps.insert(at, Step("brules", (bar.randrange(len(RELEASES)),)))
            released = [s.args[1] for s in steps[:at] if s.op == "brelease"]
            if released and bar.random() < 0.6:  # a release under the successor too
                steps.insert(at + 1, Step("brelease", (f"rr{k + 1}", bar.choice(released))))
    own_release = random.Random(f"own release {seed}")  # R24's release of its own (hist34)
    if new and (reached or own_release.random() < OWN_RELEASE):
        steps = released_again(own_release, steps, ("suite", "suite2") if two else ("suite",))
    vc = random.Random(f"vendor contamination {seed}")  # R25: the vendor's [contamination]
    first = next((i for i, s in enumerate(steps) if s.op == "vrecord" and s.args[0] == "v1"), None)
    if new and first is not None and vc.random() < VRULED:
        steps.insert(first + 1, Step("vdataset", ("wh", ("v1",), "holdout")))
        if vc.random() < 0.5:
            steps.insert(vc.randint(first + 2, len(steps)), Step("ship", ("wh",)))
        for _ in range(vc.choice([1, 1, 2])):
            steps.insert(vc.randint(0, len(steps)), Step("vcontam", (vc.randrange(len(RULES)),)))
    gate = random.Random(f"vendor gate {seed}")  # R26: the vendor trains on its own data
    for k in range(gate.choice([1, 2]) if new and gate.random() < VGATE else 0):
        trains = [(i, s.args[0]) for i, s in enumerate(steps)
                  if s.op == "vdataset" and s.args[2] == "train"]
        mine = [(i, s.args[0], s.args[1]) for i, s in enumerate(steps)
                if s.op == "vrecord" and not s.args[3] and s.args[0] != "v0"]
        if mine and (not trains or gate.random() < 0.5):  # a train set of its own to train on
            copies = [x for x in mine if x[2] == 1]  # of v1, held out in half the histories
            i, b, _copy = gate.choice(copies if copies and gate.random() < 0.5 else mine)
            at = gate.randint(i + 1, len(steps))
            steps.insert(at, Step("vdataset", (f"wg{k + 1}", (b,), "train")))
            trains = [(at, f"wg{k + 1}")]
        if trains:
            i, w = gate.choice(trains)
            at = gate.randint(i + 1, len(steps))
            if gate.random() < APPROVED:
                steps.insert(at, Step("vapprove", (w,)))
                at += 1
            steps.insert(gate.randint(at, len(steps)), Step("vtrain", (f"vc{k + 1}", w)))
    chat = random.Random(f"text {seed}")  # R28 (hist35): chat episodes exchanged
    if new and chat.random() < TEXT:
        steps = text_steps(chat, steps)
    back = random.Random(f"buy back {seed}")  # R27 (hist35): the vendor buys back
    if new and back.random() < BACK:
        steps = bought_back(back, steps)
        names = random.Random(f"vendor names the buyer's approver {seed}")  # R30 (hist36)
        first = next((i for i, s in enumerate(steps) if s.op == "bsell"), None)
        if first is not None and names.random() < NAMED:
            at = names.randint(0, first) if names.random() < 0.5 else names.randint(0, len(steps))
            steps.insert(at, Step("vname"))
            shipped = [s.args[0] for s in steps if s.op == "ship"]
            sets = [s.args[0] for s in steps if s.op == "bdataset" and s.args[2] == "train"]
            if shipped and sets and names.random() < AFTER:  # the buyer's word, then a sale
                x = names.choice(shipped)
                op = "berase" if x[1:].isdigit() and names.random() < 0.5 else "brevoke"
                at = names.randint(at + 1, len(steps))
                steps.insert(at, Step(op, (x,)))
                at = names.randint(at + 1, len(steps))
                steps.insert(at, Step("bsell", (names.choice(sets),)))
    watch = random.Random(f"monitor {seed}")  # R18: a stream of its own
    steps = [Step("monitor") if s.op == "update" and extra and watch.random() < MONITOR else s
             for s in steps]
    shipped_ck = random.Random(f"vendor checkpoints {seed}")  # R31 (hist37)
    if new and shipped_ck.random() < VCKSHIP:
        steps = checkpoint_shipped(shipped_ck, steps)
    same = random.Random(f"recorded twice {seed}")  # R34 (hist39)
    if new and same.random() < SAME:
        steps = recorded_twice(same, steps)
    rotate = random.Random(f"log key rotated {seed}")  # (hist39) between the vendor's ships
    ships = [i for i, s in enumerate(steps) if s.op in ("ship", "vckship")]
    if new and ships and rotate.random() < ROTATED:
        steps.insert(rotate.randint(ships[0] + 1, len(steps)), Step("vrotate"))
    lab = random.Random(f"lab relay {seed}")  # R36 (hist40)
    if new and lab.random() < LAB:
        steps = relayed(lab, steps, random.Random(f"lab relay held {seed}"))
    return steps


MAX_DROP = 0.5
VARIANTS = ("orig", "cut", "n1", "n2")
"""R21: what a vendor's copy of a batch (``vrecord`` with ``copy``) is of its original's
episodes (`long_rollouts`): as the original's (an exact copy), cut, or noisy (near)."""
SEALED, SEALED_SUITE, OTHER = 0.1, 0.5, 0.3
"""R22: the shares of the vendor's batches recorded sealed (``--seal``), of those made for the
buyer's suites, and of the buyer's evaluations run by ``evaluator2`` (whose X25519 key the
vendor does not seal to) instead of ``evaluator``."""
RULED = 0.5
VSUITE, PIN, ON_VSUITE = 0.3, 0.5, 0.2
"""R23: the share of histories in which the vendor ships a holdout it names ``suite@1``
(``vsuite``, of its batch ``v0``), of those in which the buyer's approver then pins its
requirements on ``suite@1`` to it (``bpin``), and of the buyer's evaluations on it."""
"""R21: the share of histories in which the buyer's approver sets its policy's
``[contamination]`` (once or twice: ``bcontam``, one of `RULES`, at a point drawn)."""
RULES: tuple[dict[str, Any], ...] = (
    {}, {"refuse": "near"}, {"refuse": "near", "numeric_threshold": 0.9}, {"runs": "near"},
    {"refuse": "near", "runs": "near"})
"""R21: the ``[contamination]`` tables a ``bcontam`` step sets (``{}``: none, the default)."""
RAISED = 0.4
"""R24: the share of histories that train in which the buyer's approver changes its policy's
``[release]`` (once or twice after the first ``btrain``: ``brules``, one of `RELEASES`), each
followed, in six in ten, by a release of a checkpoint released before (``rr1``, ``rr2``)."""
RELEASES: tuple[tuple[int | None, int | None, tuple[str, ...]], ...] = (
    (None, None, ("suite",)), (2, None, ("suite",)), (1, None, ("suite",)),
    (3, None, ("suite",)), (None, 7, ("suite",)), (2, 7, ("suite", "suite2")),
    (None, None, ("suite", "suite2")), (None, None, ()))
"""R24: the ``[release]`` of a ``brules`` successor: ``max_drop`` on every suite (tenths, or
None), ``min`` on ``suite@1``'s ``score`` (tenths, or None), and the suites required (none:
no ``[release]``)."""
OWN_RELEASE = 0.25
"""R24 (hist34): the share of the histories without hist33's ``[release]`` successors that
take `released_again`'s release of the buyer's own and its successors all the same."""
VGATE, APPROVED = 0.6, 0.8
"""R26 (hist34): the share of histories in which the vendor trains (``vtrain``, once or twice,
on one of its train sets, at a point drawn after it), and of those trainings whose dataset
the vendor's approver approves just before (``vapprove``: the others are approved only if
R14's stream did)."""
TEXT = 0.4
TEXT_VARIANTS = ("t-orig", "t-norm", "t-edit")
"""R28 (hist35): the share of histories with the vendor's chat batches (`text_steps`), and
what a copy of one is (`text_rollouts`)."""
BACK, TRUSTED = 0.5, 0.9
"""R27 (hist35): the share of histories in which the buyer sells train sets back to the vendor
(`bought_back`), and of those in which the vendor's policy comes to name the buyer's producer
key and log (``vtrust``)."""
NAMED, AFTER = 0.5, 0.7
"""R30 (hist36): the share of the histories with a sale back (R27) in which the vendor's
approver names the buyer's approver in its policy (``vname``: before the first sale in half of
those, at a point drawn in the others), and of those in which the buyer's approver then revokes
or erases something the vendor shipped (``brevoke``, ``berase``) and a sale follows
(``bsell`` of one of its train sets, one sold before too)."""
VCKSHIP, VTNAMED, WITHDRAWN, WATCHED = 0.6, 0.8, 0.3, 0.8
"""R31 (hist37): the share of histories in which the vendor's checkpoint is shipped to the buyer
(`checkpoint_shipped`: of those in which the vendor trains one, R26), of those in which the
buyer's policy names the vendor's trainer before the ship (``bvtrust``; after it in the others),
of those in which the vendor's approver then withdraws its approval of the checkpoint's dataset
(``vwithdraw``), and of those in which a revocation of the vendor's follows, watched by
``monitor --fail-on-revocation`` (``bwatch``)."""
VRULED = 0.5
"""R25: the share of histories in which the vendor holds its first batch out (``wh``, shipped
to the buyer in half of those) and its approver sets the vendor's policy's
``[contamination]`` (once or twice: ``vcontam``, one of `RULES`, at a point drawn)."""
MONITOR = 0.5
MARK = 0.3
"""The share of those histories in which the buyer's approver marks the vendor's key ``vendor``
compromised in its own policy (``bmark``, at a point drawn after the first ship: R20)."""
"""The share of the update steps of those histories that ``monitor`` the vendor's served log
instead of importing an update bundle (R18)."""
TWO_SUITES = 0.4
"""The share of those histories whose buyer requires evaluations on two suites for a release,
``suite@1`` and ``suite2@1`` (a ``two_suites`` step first; R17)."""
"""The share of histories (with the steps of R13 to R16) whose buyer's release requirement
has a ``max_drop`` (a ``max_drop`` step first: the policy the buyer starts with)."""
COMPROMISE = 0.025
"""The chance, before each step once the vendor recorded something, of its key compromise
(``vcompromise``, once a history)."""
OWN = 0.15
"""The chance, before each step once something was shipped (and after the last), of one of the
buyer's own steps (`own_step`), drawn from a stream of its own: a seed's other steps are
the same with them or without (``TRAJLEDGER_EXCHANGE_OWN=0``)."""
if "TRAJLEDGER_EXCHANGE_OWN" in os.environ:
    OWN = float(os.environ["TRAJLEDGER_EXCHANGE_OWN"])


def released_again(rnd: random.Random, steps: list[Step], suites: tuple[str, ...]
                   ) -> list[Step]:
    """R24: ``steps`` with a release of the buyer's own inserted just after the history's
    last suite is made (at a point drawn when it makes none), before the vendor's steps that
    follow (hist34; hist33 appended it, after them): the buyer makes its suites of batches it
    records itself if it holds none then (``bownsuite``: ``b90``, ``b92``), records ``b91``
    (``bown``), trains ``c91`` on it, with a parent trained before now and then, evaluates
    both on each suite (and on the vendor's ``vsuite`` if shipped before: R23's pin) and
    releases ``c91`` (``r91``); then, once or twice, its approver sets a successor with
    another ``[release]`` (``brules``) and, six times in ten, releases ``c91`` again
    (``r92``, ``r93``). Nothing of it is the vendor's: no marking nor compromise refuses it."""
    made = [i for i, s in enumerate(steps) if s.op == "bdataset" and s.args[0] in suites]
    at = made[-1] + 1 if made else rnd.randint(0, len(steps))
    trained = [s.args[0] for s in steps[:at] if s.op == "btrain"]
    parent = rnd.choice(trained) if trained and rnd.random() < 0.5 else None
    on = [*suites, *("vsuite",) * any(s.op == "ship" and s.args == ("vsuite",)
                                      for s in steps[:at])]
    out = [Step("bownsuite", (x, f"b9{2 * i}")) for i, x in enumerate(suites)]
    out += [Step("bown", ("b91",)), Step("bdataset", ("d91", ("b91",), "train")),
            Step("bapprove", ("d91",)), Step("btrain", ("c91", "d91", parent))]
    out += [Step("beval", (f"e9{i}", c, x, "evaluator"))
            for i, (c, x) in enumerate((c, x) for c in [parent, "c91"] if c for x in on)]
    out.append(Step("brelease", ("r91", "c91")))
    for k in range(rnd.choice([1, 2])):
        out.append(Step("brules", (rnd.randrange(len(RELEASES)),)))
        if rnd.random() < 0.6:
            out.append(Step("brelease", (f"r9{k + 2}", "c91")))
    return steps[:at] + out + steps[at:]


def text_steps(rnd: random.Random, steps: list[Step]) -> list[Step]:
    """R28 (hist35): ``steps`` with a vendor's batch of chat episodes (``v81``, sealed in a
    quarter of the histories) and another (``v82``: an exact copy, one equal once normalised,
    a near one, or unrelated), interleaved at points drawn in this order: in half the histories
    the vendor holds ``v81`` out (``wt``) and in half makes a train set of ``v82`` (``w82``),
    shipped then instead of ``v82``; it ships ``v81``; the buyer holds it out (``h81``) and
    makes a train set of ``v82`` (``d82``), in either order, approves and trains on it
    (``c82``)."""
    variant = rnd.choice(["t-orig", "t-norm", "t-norm", "t-edit", "other"])
    block = [Step("vrecord", ("v81", 0, "t-orig", rnd.random() < 0.25)),
             Step("vrecord", ("v82", 81, variant, False) if variant != "other" else
                  ("v82", 0, "t-orig", False))]
    if rnd.random() < 0.5:
        block.append(Step("vdataset", ("wt", ("v81",), "holdout")))
    sold = "v82"
    if rnd.random() < 0.5:
        block.append(Step("vdataset", ("w82", ("v82",), "train")))
        sold = "w82"
    made = [Step("bdataset", ("h81", ("v81",), "holdout")),
            Step("bdataset", ("d82", ("v82",), "train"))]
    block += [Step("ship", ("v81",)), Step("ship", (sold,)),
              *(made if rnd.random() < 0.6 else made[::-1]), Step("bapprove", ("d82",)),
              Step("btrain", ("c82", "d82", None))]
    at = sorted(rnd.randint(0, len(steps)) for _ in block)
    out = list(steps)
    for k, (i, step) in enumerate(zip(at, block, strict=True)):
        out.insert(i + k, step)
    return out


def bought_back(rnd: random.Random, steps: list[Step]) -> list[Step]:
    """R27 (hist35): ``steps`` with the buyer selling one or two of its train sets back to the
    vendor (``bsell``, at a point drawn after the set is made), the vendor's approver naming
    the buyer's producer key and log in its policy (``vtrust``: in nine histories in ten,
    before the first sale in seven in ten), and each sold set approved by the vendor's approver
    (``vapprove``, in eight in ten) and trained on by the vendor (``vtrain``, ``vb1``, ``vb2``)
    at points drawn after the sale."""
    for k in range(rnd.choice([1, 1, 2])):
        sets = [(i, s.args[0]) for i, s in enumerate(steps)
                if s.op == "bdataset" and s.args[2] == "train"]
        if not sets:
            return steps
        i, d = rnd.choice(sets)
        at = rnd.randint(i + 1, len(steps))
        steps = [*steps[:at], Step("bsell", (d,)), *steps[at:]]
        at = rnd.randint(at + 1, len(steps))
        if rnd.random() < APPROVED:
            steps.insert(at, Step("vapprove", (d,)))
            at += 1
        steps.insert(rnd.randint(at, len(steps)), Step("vtrain", (f"vb{k + 1}", d)))
    first = next(i for i, s in enumerate(steps) if s.op == "bsell")
    if rnd.random() < TRUSTED:
        at = rnd.randint(0, first) if rnd.random() < 0.7 else rnd.randint(first + 1, len(steps))
        steps.insert(at, Step("vtrust"))
    return steps


def checkpoint_shipped(rnd: random.Random, steps: list[Step]) -> list[Step]:
    """R31 (hist37): ``steps`` with one of the vendor's checkpoints (``vc1``, ``vc2``: R26)
    shipped to the buyer (``vckship``: its bundle, with ``--updates-since`` the size applied, and
    the buyer's import), the buyer's approver naming the vendor's trainer key in its policy's
    trainer role (``bvtrust``: before the ship in eight histories in ten), and then, at points
    drawn in this order, the buyer fine-tuning from it (``btrain`` of ``c71`` with the vendor's
    checkpoint as ``--parent``, on the vendor's dataset it was trained on, or on a train set of
    the buyer's made before), now and then the vendor's approver withdrawing its approval of
    that dataset (``vwithdraw``), and in most the vendor revoking one of the dataset's batches or
    the dataset (``vrevoke``), or declaring its key compromised since one of them
    (``vcompromise``), then the buyer's ``monitor --fail-on-revocation`` (``bwatch``)."""
    trained = [(i, s.args[0], s.args[1]) for i, s in enumerate(steps)
               if s.op == "vtrain" and s.args[0].startswith("vc")]
    if not trained:
        return steps
    i, ck, ds = rnd.choice(trained)
    members = next(s.args[1] for s in steps if s.op == "vdataset" and s.args[0] == ds)
    at = rnd.randint(i + 1, len(steps))
    named = rnd.randint(0, at) if rnd.random() < VTNAMED else rnd.randint(at, len(steps))
    out = [*steps[:at], Step("vckship", (ck,)), *steps[at:]]
    out.insert(named + (named > at), Step("bvtrust"))
    if named > at:  # shipped again once named
        out.insert(rnd.randint(named + 2, len(out)), Step("vckship", (ck,)))
    at = out.index(Step("vckship", (ck,)))
    sets = [s.args[0] for s in out[:at] if s.op == "bdataset" and s.args[2] == "train"]
    at = rnd.randint(at + 1, len(out))
    out.insert(at, Step("btrain", ("c71", rnd.choice(sets) if sets and rnd.random() < 0.5
                                   else ds, ck)))
    if rnd.random() < WITHDRAWN:
        at = rnd.randint(at + 1, len(out))
        out.insert(at, Step("vwithdraw", (ds,)))
    if rnd.random() < WATCHED:
        at = rnd.randint(at + 1, len(out))
        x = rnd.choice([*members, ds])
        out.insert(at, Step("vcompromise", (x,)) if rnd.random() < 0.2 else Step("vrevoke", (x,)))
        out.insert(rnd.randint(at + 1, len(out)), Step("bwatch"))
    return out


SAME, ROTATED = 0.5, 0.3
"""R34 (hist39): the share of histories (hist39: without a marking, a compromise or a sale
back; hist40: with them too) in which the buyer records the vendor's bytes itself first
(`recorded_twice`), and the share in which the vendor rotates its log key once after its first
ship (``vrotate``)."""


def first_brought(steps: list[Step], members: dict[str, tuple[str, ...]]) -> dict[str, int]:
    """The index of the step that first brings each vendor artifact to the buyer: a ship of it
    or of a dataset of ``members`` holding it, or a ``vckship`` of a checkpoint trained on one."""
    trained = {s.args[0]: s.args[1] for s in steps if s.op == "vtrain"}
    first: dict[str, int] = {}
    for i, s in enumerate(steps):
        x = trained.get(s.args[0], "") if s.op == "vckship" else s.args[0] if s.op == "ship" \
            else ""
        for y in (x, *members.get(x, ())) if x else ():
            first.setdefault(y, i)
    return first


def recorded_twice(rnd: random.Random, steps: list[Step]) -> list[Step]:
    """R34 (hist39): ``steps`` with the buyer recording, before the import that first brings
    it, one or two of the vendor's batches (not chat, not sealed: the file the vendor
    recorded, under its name) or train sets (of batches the buyer holds by then, under the
    vendor's name, version and split: the same bytes) itself (``bsame``), and in six in ten
    then the vendor revoking (or erasing, a batch) one of them and an update, a ``monitor`` or
    a ``bwatch`` following. Since hist40 with the buyer's marking, the vendor's compromise and
    a sale back too (R20, R15, R27: R34's second record judged as any record of the vendor's)."""
    made: dict[str, int] = {}
    members: dict[str, tuple[str, ...]] = {}
    for i, s in enumerate(steps):
        if s.op == "vrecord" and s.args[0] not in made and \
                not set(s.args[2:3]) & set(TEXT_VARIANTS) and True not in s.args[3:4]:
            made[s.args[0]] = i
        elif s.op == "vdataset" and s.args[2] == "train" and s.args[0] not in made:
            made[s.args[0]] = i
            members[s.args[0]] = tuple(s.args[1])
    first = first_brought(steps, members)
    picks = [(x, max([made[x], *(first.get(b, len(steps)) for b in members.get(x, ()))]) + 1, i)
             for x, i in first.items() if x in made]
    picks = [p for p in picks if p[1] <= p[2]]
    if not picks:
        return steps
    out = list(steps)
    chosen = sorted(((x, rnd.randint(lo, hi)) for x, lo, hi in
                     rnd.sample(picks, min(len(picks), rnd.choice([1, 1, 2])))),
                    key=lambda p: -p[1])
    for x, at in chosen:
        out.insert(at, Step("bsame", (x,)))
    if rnd.random() < 0.6:
        x = rnd.choice(chosen)[0]
        at = rnd.randint(out.index(Step("bsame", (x,))) + 1, len(out))
        op = rnd.choice(["vrevoke", "verase"]) if x not in members else "vrevoke"
        out.insert(at, Step(op, (x,)))
        out.insert(rnd.randint(at + 1, len(out)), Step(rnd.choice(["update", "monitor",
                                                                   "bwatch"])))
    return out


LAB, PASSED, HELD = 0.5, 0.7, 0.3
"""R36 (hist40): the share of histories in which a lab relays the vendor's batch to the buyer
(`relayed`; hist40: without a marking, a compromise or a sale back; hist41: with them too), of
those in which the vendor revokes or erases it and the buyer applies its log past that first,
and (hist41, a stream of its own) of those in which the batch relayed is one the buyer holds
already from the vendor (the log marked all the same: hist42, vend41 finding 2)."""


def relayed(rnd: random.Random, steps: list[Step], held: random.Random | None = None
            ) -> list[Step]:
    """R36 (hist40): ``steps`` with a lab buying one of the vendor's batches (not sealed, not
    chat, not brought to the buyer by the history's first ship) and training on it (``lbuy``),
    before the buyer holds it; in seven in ten the vendor then revokes or erases the batch and
    the buyer applies the vendor's log past that (an ``update`` or a ``monitor``: the entry is
    about nothing it holds, passed over); the buyer's approver names the lab in its policy
    (``blab``) and imports the lab's checkpoint bundle (``lrelay``), which brings the batch,
    before any ship of it; then, in eight in ten, ``bwatch``, ``monitor`` or ``update``
    (gap39's case: docs/third-party.md, the vendor's log marked unread). hist41: with the
    buyer's marking, the vendor's compromise and a sale back too, and in three in ten (drawn
    from ``held``) the batch is one a ship brought the buyer before the relay (a mark all the
    same: `relay`)."""
    same = {s.args[0] for s in steps if s.op == "bsame"}  # (R34's own records: not these)
    made = {s.args[0]: i for i, s in enumerate(steps) if s.op == "vrecord" and len(s.args) > 3
            and s.args[0] not in {"v0", *same} and s.args[2] not in TEXT_VARIANTS
            and not s.args[3]}
    members = {s.args[0]: tuple(s.args[1]) for s in steps if s.op == "vdataset"}
    first = first_brought(steps, members)
    ships = [i for i, s in enumerate(steps) if s.op in ("ship", "vckship")]
    again = held is not None and held.random() < HELD
    picks = [x for x, i in made.items() if ships and (first.get(x, len(steps)) < len(steps)
                                                      if again else ships[0] < first.get(
                                                          x, len(steps)) > i)]
    if not picks:
        return steps
    x = rnd.choice(picks)
    out, hi = list(steps), first.get(x, len(steps))  # inserted at hi or before: before its ship
    if again:  # (hist41) after its ship: the lab's record of it is the buyer's already
        hi, ships = len(steps), [first[x]]
    at = rnd.randint(made[x] + 1, hi)
    out.insert(at, Step("lbuy", (x,)))
    hi, ship = hi + 1, ships[0] + (at <= ships[0])
    if rnd.random() < PASSED:
        at = rnd.randint(at + 1, hi)
        out.insert(at, Step(rnd.choice(["vrevoke", "vrevoke", "verase"]), (x,)))
        hi, ship = hi + 1, ship + (at <= ship)
        at = rnd.randint(max(at, ship) + 1, hi)
        out.insert(at, Step(rnd.choice(["update", "monitor"])))
        hi, ship = hi + 1, ship + (at <= ship)
    at = rnd.randint(max(at, ship) + 1, hi)
    out[at:at] = [Step("blab"), Step("lrelay")] if rnd.random() < 0.5 else [Step("lrelay")]
    if out[at].op == "lrelay":
        out.insert(rnd.randint(0, at), Step("blab"))
    if rnd.random() < 0.8:
        out.insert(rnd.randint(out.index(Step("lrelay")) + 1, len(out)),
                   Step(rnd.choice(["bwatch", "bwatch", "monitor", "update"])))
    return out


def suite2(v: int) -> list[Step]:
    """The steps that make the second suite ``suite2@1`` of a vendor batch ``v{v}`` (R17)."""
    return [Step("vrecord", (f"v{v}", 0)), Step("ship", (f"v{v}",)),
            Step("bdataset", ("suite2", (f"v{v}",), "holdout"))]


def own_step(rnd: random.Random, batches: list[str], approved: list[str], datasets: int) -> Step:
    """One of the buyer's own steps (R13): its approver withdraws its newest approval of a
    dataset (``bwithdraw``), revokes a batch or dataset it holds (``brevoke``) or erases a
    batch it holds (``berase``)."""
    op = rnd.choices(["bwithdraw", "brevoke", "berase"],
                     [3 if approved else 0, 1, 1 if batches else 0])[0]
    if op == "bwithdraw":
        return Step(op, (rnd.choice(approved),))
    if op == "berase":
        return Step(op, (rnd.choice(batches),))
    pool = batches + [f"d{i}" for i in range(1, datasets + 1)] + ["suite", "suite2"]
    return Step(op, (rnd.choice(pool or ["suite"]),))


# -- the model -----------------------------------------------------------------------------------


@dataclass
class Art:
    label: str
    kind: str
    """``batch``, ``dataset`` or ``checkpoint``."""
    batches: tuple[str, ...] = ()
    split: str = "train"
    data: int = 0
    """A batch's episodes (the seed of `rollouts`; a copy has its original's)."""
    variant: str = "orig"
    """A batch's episodes as `long_rollouts` makes them of ``data`` (R21: one of `VARIANTS`)."""
    sealed: bool = False
    """A batch recorded ``--seal`` (R22)."""
    dataset: str = ""
    parent: str | None = None
    digest: str = ""
    index: int = 0
    """At the buyer: the buyer's log size before the step that brought it in."""
    vindex: int = 0
    """At the vendor: its record's index in the vendor's log."""
    suite: str = "suite"
    """An evaluation's suite."""
    evals: tuple[str | None, ...] = ()
    """A release's latest evaluation on each required suite when it was made."""
    score: int = 0
    """A checkpoint's score in tenths (`score_of`: what the judge gives it, R19)."""
    approvals: list[list[Any]] = field(default_factory=list)
    """At the buyer: ``[log size before it, envelope digest, withdrawn]`` per approval."""
    own: bool = False
    """R34: at the buyer, a record of the vendor's bytes the buyer made itself (``bsame``)."""
    second: int | None = None
    """R34: the buyer's log size before the import that brought the vendor's record of an
    ``own`` one's bytes (None: not here yet)."""

    def approved_before(self, before: int) -> bool:  # R7: a withdrawn one counts for nothing
        return any(i < before and not out for i, _d, out in self.approvals)


@dataclass
class Model:
    vendor: dict[str, Art] = field(default_factory=dict)
    """What the vendor recorded (batches and datasets)."""
    revoked: set[str] = field(default_factory=set)
    erased: set[str] = field(default_factory=set)
    """At the vendor: labels revoked, batches erased."""
    revoked_at: dict[str, int] = field(default_factory=dict)
    """At the vendor: the log index of each revocation."""
    erased_at: dict[str, int] = field(default_factory=dict)
    """At the vendor: the log index of each erasure (R29)."""
    buyer: dict[str, Art] = field(default_factory=dict)
    """What the buyer holds: imported vendor artifacts (same labels), its datasets and
    checkpoints."""
    vapprovals: dict[str, list[list[Any]]] = field(default_factory=dict)
    """At the vendor: ``[envelope digest, withdrawn, vendor's log index]`` per approval of a
    dataset, by label; none reaches the buyer (R14)."""
    vchecks: dict[str, Art] = field(default_factory=dict)
    """The vendor's checkpoints (R26; ``vindex``: its log size before the training)."""
    drop: int | None = None
    """The ``max_drop`` of the buyer's release requirements in force, in tenths (R16; R24)."""
    least: int | None = None
    """The ``min`` of the buyer's requirement on ``suite@1``'s ``score`` in force, in tenths
    (R24)."""
    vrules: dict[str, Any] = field(default_factory=dict)
    """The ``[contamination]`` of the vendor's policy in force (R25: one of `RULES`)."""
    suites: tuple[str, ...] = ("suite",)
    """The suites the buyer's release requires (R17)."""
    compromised_since: int | None = None
    """The vendor's log index from which its policy declares its key ``vendor`` compromised
    (R15)."""
    own_revoked: set[str] = field(default_factory=set)
    own_erased: set[str] = field(default_factory=set)
    """What the buyer's approver revoked and erased (R13)."""
    stolen_here: set[str] = field(default_factory=set)
    """What the buyer's importing approver revoked for the vendor's key compromise (R15)."""
    applied: int = 0
    """The vendor's log size the buyer applied (0: nothing imported yet)."""
    marked: int | None = None
    """The buyer's log index from which its own policy declares ``vendor`` compromised (R20)."""
    rules: dict[str, Any] = field(default_factory=dict)
    """The ``[contamination]`` of the buyer's policy in force (R21: one of `RULES`)."""
    pinned: bool = False
    """The buyer's policy in force pins its requirements on ``suite@1`` to the vendor's
    dataset of that name (``vsuite``: R23)."""
    taken: dict[tuple[str, str], int] = field(default_factory=dict)
    """``("revoked" | "erased", label)``: the buyer's log size before the import that took the
    vendor's revocation or erasure of a held artifact in (R20: the index of its record here)."""
    back: dict[str, Art] = field(default_factory=dict)
    """At the vendor: what its imports of the buyer's bundles brought (R27: the buyer's train
    sets and its own batches in them; the vendor's own batches in them stay its own)."""
    trusts_buyer: bool = False
    """The vendor's policy in force names the buyer's producer key and log (R27: ``vtrust``)."""
    bapplied: int = 0
    """The buyer's log size the vendor applied (R27: 0, nothing imported from it yet)."""
    vtook: set[str] = field(default_factory=set)
    """R27: the vendor's artifacts whose revocation by the buyer's approver a sale brought into
    the vendor's log (ignored there, carried by its bundles: history 9030)."""
    sold_revoked: set[str] = field(default_factory=set)
    """R27: what the buyer's approver had revoked when the vendor last applied the buyer's log."""
    sold_erased: set[str] = field(default_factory=set)
    """R30: what the buyer's approver had erased then."""
    names_approver: bool = False
    """R30: the vendor's policy in force names the buyer's approver (``vname``)."""
    vrev_b: set[str] = field(default_factory=set)
    verase_b: set[str] = field(default_factory=set)
    """R30: what the vendor holds (its own, or bought back) that the buyer's approver revoked
    and erased in records a sale brought into the vendor's log while its policy named that
    approver: they count there (an erasure deletes the vendor's files)."""
    vtrainer: bool = False
    """R31: the buyer's policy in force names the vendor's trainer key (``bvtrust``)."""
    vwithdrawn_at: list[int] = field(default_factory=list)
    """R31: the vendor's log index of each withdrawal of its approver's (``vwithdraw``)."""
    rotated: bool = False
    """R35: the vendor rotated its log key (``vrotate``)."""
    sold_own: set[str] = field(default_factory=set)
    """R34 with R27 (hist40): the vendor's batches whose bytes the buyer recorded itself first
    and sold back in a set: the vendor holds the buyer's record of them too."""
    lab: dict[str, Art] = field(default_factory=dict)
    """R36: what the lab made of the vendor's batch it bought (``l1``, ``lc1``: `Art.batches`,
    `Art.digest`)."""
    lab_named: bool = False
    """R36: the buyer's policy in force names the lab's keys and log (``blab``)."""
    unread: bool = False
    """R36: the lab's bundle brought records after the buyer applied the vendor's log (any:
    hist42, vend41 finding 2): the log is marked unread, its size applied counts as 0 until a
    read from its first entry."""
    relayed: dict[str, bool] = field(default_factory=dict)
    """R36 with R15 (hist41): the vendor's batches the lab's bundle brought here (True: first,
    not held before): a key compromise the vendor declares stops them no more
    (``_compromises``: "a log stops only what it alone brought here")."""
    declared: int | None = None
    """R15 (hist41): the vendor's log index of its policy declaring ``vendor`` compromised."""

    @property
    def since(self) -> int:  # R36: where the next read of the vendor's log starts
        return 0 if self.unread else self.applied

    def learn(self, size: int) -> None:  # R10: an import takes in the whole extension (R14:
        for how, done in (("revoked", self.revoked), ("erased", self.erased)):  # no approval)
            for x in done & self.buyer.keys() if self.trusted(size) else ():  # R20: ignored
                if self.vendors_here(x):  # R34: no authority over the buyer's own record
                    self.taken.setdefault((how, x), size)
        self.stolen_here |= {x for x in self.buyer if x in self.vendor and self.stolen(x)
                             and not self.buyer[x].own and x not in self.relayed}  # (R34, R36:
        # from the vendor's log alone)
        out = {d for ap in self.vapprovals.values() for d, gone, _i in ap if gone}  # R31: of
        for a in self.buyer.values():  # an approval a checkpoint's bundle brought here
            for ap in a.approvals:
                ap[2] = ap[2] or ap[1] in out

    def carried(self, ck: str) -> bool | None:  # R31: ``vckship`` (None: either)
        """The vendor's checkpoint ``ck`` shipped to the buyer: refused while the buyer's
        policy does not name the vendor's trainer (its record's signer) and after the buyer's
        marking (R20: its dataset's and batches' records, signed by ``vendor``), and when no
        approval of its dataset logged before it counts (withdrawn since: an import refuses a
        bundle that fails for anything but a revocation, exchange.import_bundle step 3); done
        otherwise, its lineage revoked at the vendor (taken in as revoked: R10), or revoked,
        erased or held out here (the import judges the bundle, not this ledger: the checkpoint
        then fails here) alike (hist38, probed by hand); either after the vendor's compromise
        (R15) or a revocation of the buyer's approver in the vendor's log (R27, R30)."""
        if not self.vtrainer or self.marked is not None:
            return False
        c = self.vchecks[ck]
        if not any(not out and i < c.vindex for _d, out, i in self.vapprovals.get(c.dataset, [])):
            return False
        lineage = {c.dataset, *self.vendor[c.dataset].batches}
        return None if self.compromised_since is not None or lineage & (
            self.vtook | self.vrev_b) else True

    def watched(self) -> bool | None:  # R31: ``monitor --fail-on-revocation``
        """Exit 0 (True) or 1 (False) of ``bwatch`` (None: either): 1 when the vendor revoked
        or erased something the buyer holds since the size applied (docs/third-party.md "What a
        buyer runs daily"); either after the buyer's marking or the vendor's compromise (what
        is not applied here, out36; R15's revocations here), a sale back (R27: the buyer's own
        revocations in the vendor's log) or a withdrawal (a revocation of an approval)."""
        if self.compromised_since is not None or self.bapplied or \
                any(i >= self.since for i in self.vwithdrawn_at):
            return None
        return not self.fresh()

    def fresh(self) -> set[str]:  # R31: what the vendor's extension revokes or erases here
        return {x for x, i in [*self.revoked_at.items(), *self.erased_at.items()]
                if x in self.buyer and i >= self.since and self.vendors_here(x)}

    def vendors_here(self, label: str, named: bool = False) -> bool:  # R34
        """Whether the vendor's record of ``label`` counts at the buyer: it is here (an own
        record's once an import brought it), and, by name, the record named is not the
        buyer's own (the first of that name here)."""
        a = self.buyer[label]
        return label in self.vendor and not (a.own and (named or a.second is None))

    @property
    def known_revoked(self) -> set[str]:  # R20: none the vendor's key signed since the marking
        return {x for (how, x), i in self.taken.items()
                if how == "revoked" and self.trusted(i)} | self.stolen_here

    @property
    def known_erased(self) -> set[str]:  # R20: as for revocations
        return {x for (how, x), i in self.taken.items() if how == "erased" and self.trusted(i)}

    def trusted(self, index: int) -> bool:  # R20: the vendor's key before the buyer's marking
        return self.marked is None or index < self.marked

    def stolen(self, label: str) -> bool:  # R15: signed by the vendor's key since its theft
        k = self.compromised_since
        return k is not None and self.vendor[label].vindex >= k

    # The vendor's view (its newest bundle): R2, R3 with all it knows.
    def v_ok(self, label: str) -> bool:
        a = self.vendor[label]
        return all(x not in self.revoked and not self.stolen(x) for x in (label, *a.batches))

    def v_here(self, label: str, also: bool = False) -> bool:  # R15: in the vendor's ledger,
        a, k = self.vendor[label], self.compromised_since  # a revocation the key signed since
        return all((x not in self.revoked or (k is not None and self.revoked_at[x] >= k))
                   and (also or not self.stolen(x)) and x not in self.vrev_b  # its theft
                   for x in (label, *a.batches))  # counts for nothing (R30: the buyer's
        # approver's, once named, counts); ``also``: the buyer's record of the same bytes is
        # held there too (`sold_own`), so the key's signature since its theft fails nothing
        # (R34 with R27 and R15; hist42, seed 1827)

    # The buyer's view.
    def batch_ok(self, label: str, named: bool = False) -> bool:  # R2, R10, R13, R20, R34
        a, theirs = self.buyer[label], self.vendors_here(label, named)
        if a.own and a.second is not None and not self.trusted(a.second):
            theirs = False  # rev36: a record the policy does not believe is ignored
        erased = label in self.own_erased | (self.known_erased if theirs else set())
        return label not in (self.known_revoked if theirs else self.stolen_here) | \
            self.own_revoked and (not theirs or self.trusted(
                a.index if a.second is None else a.second)) and not (
            self.files_gone(label) and not erased)  # missing (history 4009; R34: by name, the
        # buyer's own record, whose files the vendor's erasure of its own record deleted)

    def record_ok(self, label: str, named: bool = False) -> bool:  # R3, R10, R13, R34
        a = self.buyer[label]
        return self.batch_ok(label, named) and all(self.batch_ok(b) for b in a.batches)

    def erased_here(self, label: str) -> bool:  # R4, R10, R13: its bytes gone at the buyer
        return label in self.known_erased | self.own_erased

    def files_gone(self, label: str) -> bool:  # R13, R20: an erasure taken in deleted them
        return ("erased", label) in self.taken or label in self.own_erased

    def holdouts(self, d: Art, before: int) -> list[Art]:
        """The holdouts recorded here before ``before``, one the buyer's marking distrusts too
        (R11, hold35: fail closed in the gate, the verifiers and ``dataset create`` alike)."""
        return [o for o in self.buyer.values() if o.kind == "dataset" and o.split == "holdout"
                and o.label != d.label and o.index < before]

    def held_out(self, d: Art, before: int) -> bool:  # R11, membership
        return any(set(o.batches) & set(d.batches) for o in self.holdouts(d, before))

    def copies(self, d: Art, before: int, gone: bool = False) -> bool:  # R11, R21, R22
        """Whether a batch of ``d`` holds a copy of a held-out one that the rules in force
        refuse. An erased held-out batch has nothing to compare (a sealed one is compared by
        its record); ``gone``: nor has one whose bytes are gone here (``dataset create``)."""
        held = [h for o in self.holdouts(d, before) for b in o.batches
                if ((h := self.buyer[b]).sealed and not gone) or not self.absent(b, gone)]
        return self.copied([self.buyer[b] for b in d.batches if not (  # skipped: history 3216
            gone and self.absent(b, True))], held)

    def copied(self, train: list[Art], held: list[Art],
               rules: dict[str, Any] | None = None) -> bool:  # R21, R22, R25
        return any(k is not None and refused(k, self.rules if rules is None else rules)
                   for t in train for h in held
                   if (k := relation(t, h)) != "run" or not h.sealed)

    def v_dataset(self, batches: tuple[str, ...], split: str) -> bool | None:  # R25
        """The vendor's ``dataset create`` (None: either), as the buyer's (R11, R21, R22)
        from what the vendor holds, under the vendor's ``[contamination]`` in force: a train
        set of a batch the vendor holds out, or of a copy of one its rules refuse, is
        refused (a batch it erased skipped), and so is a holdout of a batch of one of its
        train sets, or of one its train sets hold a copy of."""
        arts, gone = {**self.back, **self.vendor}, self.erased | self.verase_b  # R27, R30
        sets = [o for o in arts.values() if o.kind == "dataset"]
        held = [o for o in sets if o.split == "holdout"]
        trains = [o for o in sets if o.split == "train"]
        if split == "holdout":
            if any(set(o.batches) & set(batches) for o in trains):
                return False
            if set(batches) & gone:
                return None
            return not self.copied([arts[b] for o in trains for b in o.batches if b not in gone],
                                   [arts[b] for b in batches], self.vrules)
        if any(set(o.batches) & set(batches) for o in held):
            return False
        return not self.copied([arts[b] for b in batches if b not in gone],
                               [arts[b] for o in held for b in o.batches if b not in gone],
                               self.vrules)

    def v_admit(self, label: str) -> bool:  # R26: the vendor's gate, under its own policy
        """``admit`` (and ``train``) at the vendor, as the buyer's gate (R4, R7, R11, R21,
        R22) from what the vendor holds under its own ``[contamination]`` in force (R25): its
        record holds there (R15: not signed since the key's theft, nothing revoked), it and
        its batches not erased (history 9239), an approval of the vendor's approver not
        withdrawn, no batch held out by a vendor holdout (one signed since the theft too: fail
        closed, hold35; runner/admission.py); no held-out batch the vendor erased
        unless sealed (its producer's erasure ends no comparison: R11), none sealed whose
        record was signed since the theft (hist32 finding 1), and no copy of one its rules
        refuse (a sealed one compared by its record: no runs)."""
        d, gone = self.v_art(label), self.erased | self.verase_b  # R30: an approver's too
        held = [self.vendor[b] for o in self.v_holdouts(label) for b in o.batches]
        return (d.split == "train" and self.v_holds(label) and not {label, *d.batches} & gone
                and any(not out for _d, out, _i in self.vapprovals.get(label, []))
                and not set(d.batches) & {h.label for h in held}
                and not any(h.label in self.erased - self.verase_b and not h.sealed
                            for h in held)  # R30: an approver's erasure ends the comparison
                and not any(h.sealed and self.stolen(h.label) for h in held)
                and not self.copied([self.v_art(b) for b in d.batches],
                                    [h for h in held if h.sealed or h.label not in gone],
                                    self.vrules))

    def v_checkpoint_ok(self, label: str) -> bool:  # R26: verify at the vendor (R5, R7, R11)
        c = self.vchecks[label]
        d = self.v_art(c.dataset)
        return self.v_holds(d.label) and any(
            not out and i < c.vindex for _d, out, i in self.vapprovals.get(d.label, [])
        ) and not any(o.vindex < c.vindex and set(o.batches) & set(d.batches)
                      for o in self.v_holdouts(d.label))

    def v_art(self, label: str) -> Art:  # R27: the vendor's own, or what it bought back
        return self.vendor[label] if label in self.vendor else self.back[label]

    def v_holds(self, label: str) -> bool:  # R26, R27: at the vendor, under its policy
        """Whether ``label``'s record and its batches' hold at the vendor: its own as R26 says
        (`v_here`), the buyer's (R27) always: their import verified them under the vendor's
        policy, and a revocation or erasure by the buyer's approver, whom that policy does not
        name, is ignored there (docs/third-party.md "Updates between organisations")."""
        a = self.v_art(label)
        return all(self.v_here(x, x in self.sold_own) for x in (label, *a.batches)
                   if x in self.vendor) and not (
            {label, *a.batches} & self.vrev_b)  # R30: the buyer's approver, once named

    def sell(self, label: str) -> bool | None:  # R27: the vendor imports the buyer's bundle
        """The buyer's ``export`` of its train set ``label`` imported by the vendor (None:
        either): refused unless the vendor's policy in force names the buyer's producer key and
        log (an import verifies the whole bundle under the importer's policy in force,
        docs/third-party.md "What an import adds to your ledger"), and once the vendor declared
        its key ``vendor`` compromised when the bundle holds a record that key signed (a vendor
        batch, its environment): its successor names ``vendor`` in no role, and a bundle is
        judged under one policy, not the vendor's history (schemas/SPEC.md "Which keys count
        for a record"; as R20's ship after the buyer's marking). Either when the buyer's own
        record fails there (its export of it may be refused)."""
        d = self.buyer[label]
        if not self.record_ok(label) or (self.compromised_since is not None and any(
                self.buyer[b].own for b in d.batches)):  # R34: which records the bundle holds
            return None
        if not self.trusts_buyer:
            return False
        return self.compromised_since is None or not any(b in self.vendor for b in d.batches)

    def v_bundle_ok(self, label: str) -> bool | None:  # R2, R3, R20, R27, R34
        """Whether the vendor's newest bundle of ``label`` verifies under the buyer's policy
        in force: as the vendor knows it (`v_ok`), before the buyer's marking (R20), and none
        of its lineage revoked by the buyer's approver in a record a sale brought into the
        vendor's log (R27: its policy ignored it, the buyer's counts it; history 9030). Either
        (None) after the marking for a batch the buyer sold back its own record of (R34 with
        R27: the bundle carries that record too, which the buyer's policy believes where it
        ignores the vendor's: the lead's decision, twenty-fourth round; seed 1605)."""
        if self.marked is not None and label in self.sold_own:
            return None
        return self.v_ok(label) and self.marked is None and not (
            {label, *self.vendor[label].batches} & self.vtook)

    def v_disowned(self, label: str) -> bool:  # R29: an auditor's verifiers of the bundle
        """Whether the vendor's newest bundle of ``label`` holds an erasure, of it or of one of
        its batches, that ``vendor`` signed at or after the point its policy declares (an
        artifact or a revocation so signed fails `v_ok` already)."""
        k = self.compromised_since
        return k is not None and any(self.erased_at.get(x, -1) >= k
                                     for x in (label, *self.vendor[label].batches))

    def v_holdouts(self, label: str) -> list[Art]:  # R26: the vendor's, one signed since
        return [o for o in self.vendor.values() if o.kind == "dataset"  # the theft too (hold35)
                and o.split == "holdout" and o.label != label]

    def absent(self, label: str, gone: bool) -> bool:  # R4, R13: nothing to compare
        return self.erased_here(label) or (gone and self.files_gone(label))

    def new_holdout(self, batches: tuple[str, ...]) -> bool | None:  # R11, R21, R22
        """``dataset create`` of a holdout of ``batches`` (None: either): refused when a train
        set here holds one of them, or a copy of one that the rules in force refuse."""
        trains = [o for o in self.buyer.values() if o.kind == "dataset" and o.split == "train"]
        if any(set(o.batches) & set(batches) for o in trains):
            return False
        if any(self.absent(b, True) for b in batches):
            return None
        return not self.copied([self.buyer[b] for o in trains for b in o.batches
                                if not self.absent(b, True)], [self.buyer[b] for b in batches])

    def admit(self, label: str, now: int) -> bool:  # R4, R10, R11
        d = self.buyer[label]
        return (self.record_ok(label) and d.split == "train"
                and not any(self.erased_here(b) for b in (label, *d.batches))
                and not self.held_out(d, now) and not self.copies(d, now)
                and not self.erased_held_out(d, now) and not self.untrusted_held_out(d, now)
                and d.approved_before(now + 1))

    def untrusted_held_out(self, d: Art, now: int) -> bool:  # R20, R22 (hist32 finding 1)
        """A sealed held-out batch whose record does not count here (the buyer's marking):
        ciphertext only, and fingerprints no one can trust: it cannot be checked, until an
        approver erases it (as an unreadable batch, R11)."""
        return any(h.sealed and h.label in self.vendor and not self.trusted(h.index)
                   and h.label not in self.own_erased
                   for o in self.holdouts(d, now) for b in o.batches if (h := self.buyer[b]))

    def erased_held_out(self, d: Art, now: int) -> bool:  # R11: the vendor's erasure only
        """A held-out batch whose bytes the vendor's erasure deleted here, the buyer's approver
        not having erased it: cannot be checked (a sealed one is compared by its record, R22),
        also once the buyer's marking makes that erasure count for nothing (R20, history 234:
        the bytes stay gone, and no bundle of the batch imports under the marking)."""
        return any(self.files_gone(b) and b not in self.own_erased and not self.buyer[b].sealed
                   for o in self.holdouts(d, now) for b in o.batches)

    def trained_on(self, ck: str) -> list[str]:  # R37: the checkpoint's and its parents'
        c = self.buyer[ck]
        return [*self.buyer[c.dataset].batches, *(self.trained_on(c.parent) if c.parent else [])]

    def suite_copies(self, ck: str, suite: str) -> bool:  # R37 (evalc46)
        """Whether ``suite`` holds a copy, refused by the rules in force, of a batch ``ck`` was
        trained on (a run of steps counts for a sealed suite too: ``eval`` unseals it)."""
        return any(k is not None and refused(k, self.rules)
                   for t in self.trained_on(ck) if not self.absent(t, True)
                   for h in self.buyer[suite].batches
                   if (k := relation(self.buyer[t], self.buyer[h])))

    def evaluation_ok(self, label: str) -> bool:  # R12
        e = self.buyer[label]
        return self.checkpoint_ok(e.dataset) and self.record_ok(e.suite)

    def latest(self, ck: str, suite: str = "suite", before: int | None = None) -> str | None:
        """The latest evaluation of ``ck`` on the requirement ``suite``'s dataset (R23: the
        vendor's ``vsuite`` once pinned) logged before ``before``."""
        on = "vsuite" if self.pinned and suite == "suite" else suite
        evals = [e.label for e in self.buyer.values() if e.kind == "evaluation"
                 and e.dataset == ck and e.suite == on and (before is None or e.index < before)]
        return evals[-1] if evals else None

    def release_ok(self, label: str) -> bool:  # R12, R16, R17, R23, R24: the rules now
        r = self.buyer[label]  # and every evaluation it cites (its lineage: hist34, 9007)
        return bool(self.suites) and self.checkpoint_ok(r.dataset) and self.scored(
            r.dataset) and all(self.evaluation_ok(e) for e in r.evals if e) and all(
            (e := self.latest(r.dataset, x, r.index)) is not None and e in r.evals
            and self.evaluation_ok(e) and self.parent_evaluated(r.dataset, r.index, x, r.evals)
            for x in self.suites)

    def releasable(self, ck: str, now: int) -> bool:  # R12, R16, R17, R24: a release now
        return bool(self.suites) and self.checkpoint_ok(ck) and self.scored(ck) and all(
            (e := self.latest(ck, x)) is not None and self.evaluation_ok(e)
            and self.parent_evaluated(ck, now, x) for x in self.suites)

    def parent_evaluated(self, ck: str, before: int, suite: str,
                         cited: tuple[str | None, ...] | None = None) -> bool:  # R16, R19
        parent = self.buyer[ck].parent
        if self.drop is None or parent is None:
            return True
        e = self.latest(parent, suite, before)
        return e is not None and (cited is None or e in cited) and (
            self.buyer[parent].score - self.buyer[ck].score <= self.drop)  # tenths: exact

    def scored(self, ck: str) -> bool:  # R24: the judge's score within the rules' min
        return self.least is None or self.buyer[ck].score >= self.least

    def checkpoint_ok(self, label: str, named: bool = False) -> bool:  # R5, R10, R11, R32
        """Whether ``label``'s bytes hold by digest: every checkpoint record of them here
        (R32), or, ``named``, its own record (a reference by name)."""
        if not named:
            return all(self.checkpoint_ok(x, True) for x in self.claims(label))
        c = self.buyer[label]
        d = self.buyer[c.dataset]
        return (self.record_ok(d.label) and d.split == "train"
                and not self.held_out(d, c.index)
                and d.approved_before(c.index)
                and (c.parent is None or self.checkpoint_ok(c.parent)))

    def claims(self, label: str) -> list[str]:  # R32: the checkpoint records of its bytes
        return [x for x, a in self.buyer.items()
                if a.kind == "checkpoint" and a.digest == self.buyer[label].digest]


def relation(a: Art, b: Art) -> str | None:
    """R21: what batch ``a``'s episodes are of ``b``'s (`long_rollouts`): ``exact`` copies,
    sharing a ``run`` of 21 steps, ``near`` (cosine 0.996 to 0.999: measured) or ``far``
    (0.95 to 0.99) duplicates, or nothing (None)."""
    if a.data != b.data:
        return None
    if (text := {a.variant, b.variant}) & set(TEXT_VARIANTS):  # R28: chat episodes
        return "near" if len(text) == 2 and "t-edit" in text else "exact"
    if a.variant == b.variant:
        return "exact"
    if "cut" in (a.variant, b.variant):
        return "run" if "orig" in (a.variant, b.variant) else None
    return "near" if abs(NOISE[a.variant] - NOISE[b.variant]) < 0.1 else "far"


def refused(kind: str, rules: dict[str, Any]) -> bool:
    """R21: whether a copy of ``kind`` (`relation`) is refused under ``[contamination]``
    ``rules`` (docs/audit-index.md "Refusing near duplicates")."""
    near = rules.get("refuse") == "near"
    if kind == "run":
        return near if rules.get("runs") == "near" else True
    if kind == "far":
        return near and rules.get("numeric_threshold", 0.995) <= 0.95
    return kind == "exact" or near


# -- running a history ---------------------------------------------------------------------------


@dataclass
class Run:
    vendor: Side
    buyer: Side
    root: Path
    model: Model = field(default_factory=Model)
    ran: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    successor: Path | None = None
    """The buyer's successor policy once it marked the vendor's key (R20): what the vendor's
    bundles are verified under from then on."""
    serial: int = 1
    """The serial of the buyer's policy in force (R20, R21: `succeed`)."""
    marking: str = ""
    """The ``[[revoked_keys]]`` table of the buyer's marking (R20), once it marked."""
    release: tuple[int | None, int | None, tuple[str, ...]] = (None, None, ("suite",))
    """The buyer's ``[release]`` in force (R24: as `RELEASES`' items)."""
    vtext: str = ""
    """The vendor's policy in force without its ``[contamination]``, at serial 1 (R15, R25:
    `vsucceed`)."""
    vserial: int = 1
    own_env: bool = False
    """The buyer registered its environment ``own@1`` (R24's batches of its own)."""
    grid_env: bool = False
    """The buyer registered the vendor's environment ``grid@1`` itself (R34)."""
    lab: Side | None = None
    """R36: the lab, a buyer of the vendor's (`relay`)."""

    @property
    def policy(self) -> Path:
        return self.buyer.home / "policy.toml"


def lineage(m: Model, label: str) -> list[str]:
    """A vendor artifact and its batches (what an import of it brings)."""
    return [label, *m.vendor[label].batches]


def expect(m: Model, s: Step, size: int) -> bool | None:
    a = s.args
    if s.op in ("vrecord", "vdataset", "vrevoke", "verase") and m.compromised_since is not None:
        return False  # R15: signing with a key declared compromised is refused
    if s.op == "vdataset" and a[2] == "train" and any(m.vendor[b].sealed for b in a[1]):
        return False  # R22: a sealed batch is never trained on
    if s.op == "vdataset":  # R25: the vendor's dataset create, as its policy says
        return m.v_dataset(a[1], a[2])
    if s.op == "bpin":  # R23: policy set refuses a pin to a record that does not verify here
        return False if not m.trusted(m.buyer["vsuite"].index) else (
            True if m.record_ok("vsuite") else None)
    if s.op == "vtrain":  # R26: the vendor's gate (R27: on what it bought back too)
        return m.v_admit(a[1])
    if s.op == "bsell":  # R27
        return m.sell(a[0])
    if s.op == "vckship":  # R31
        return m.carried(a[0])
    if s.op == "bwatch":
        return m.watched()
    if s.op == "lrelay":  # R36: the buyer's policy names the lab's keys and log (R20: and
        return m.lab_named and m.marked is None  # trusts the vendor's key: hist41)
    if s.op in ("vcompromise", "bmark", "bcontam", "brules", "vcontam", "bown", "bownsuite",
                "vtrust", "vname", "bvtrust", "vrotate", "lbuy", "blab"):
        return True
    if s.op == "bsame":  # R34: a batch recorded again; a dataset made again as R11, R21 say
        x = m.vendor[a[0]]
        return True if x.kind == "batch" else expect(m, Step("bdataset", (a[0], x.batches,
                                                                          "train")), size)
    if s.op in ("vrecord", "vrevoke"):  # R33: again, done and nothing new recorded
        return True
    if s.op == "verase":
        return None if a[0] in m.erased | m.verase_b else True
    if s.op == "ship":  # R20: after the buyer's marking its policy trusts no vendor record
        if (ok := m.v_bundle_ok(a[0])) is None:  # (R34 with R27: none but the buyer's own)
            return None
        return False if m.marked is not None else True if ok else None
    if s.op in ("update", "monitor"):  # R10, R18
        return True
    if s.op == "bdataset":  # R11, R21 (the rules in force), R22 (a sealed batch)
        d = Art(a[0], "dataset", a[1], a[2], index=size)
        if a[2] == "holdout":
            return m.new_holdout(a[1])
        if any(m.buyer[b].sealed for b in a[1]) or m.held_out(d, size + 1):
            return False
        return not m.copies(d, size + 1, gone=True)
    if s.op == "bapprove":
        return m.record_ok(a[0])
    if s.op == "beval":  # R12; R22: only the key a sealed suite was sealed to opens it
        suite = a[2] if len(a) > 2 else "suite"
        return m.checkpoint_ok(a[1]) and m.record_ok(suite) and not any(
            m.erased_here(b) or (m.buyer[b].sealed and a[3:] == ("evaluator2",))
            for b in m.buyer[suite].batches) and not m.suite_copies(a[1], suite)  # R37
    if s.op == "brelease":
        return m.releasable(a[1], size)
    if s.op == "btrain":
        _label, ds, parent = a
        if parent is not None and not m.checkpoint_ok(parent):
            return False
        return m.admit(ds, size)
    if s.op in ("bwithdraw", "vwithdraw"):
        return True
    if s.op == "vapprove":  # the vendor's approve: its record holds there (R3, R15, R27)
        return m.v_holds(a[0])
    if s.op == "brevoke":  # R33: again, done and nothing new recorded
        return True
    if s.op == "berase":
        return None if a[0] in m.own_erased else True
    raise AssertionError(s.op)


def refs(m: Model, s: Step) -> bool:
    """Whether every artifact step ``s`` names exists where the step needs it."""
    a = s.args
    if s.op in ("vdataset",):
        return all(b in m.vendor for b in a[1])
    if s.op in ("ship", "vrevoke", "verase"):
        return a[0] in m.vendor
    if s.op == "vcompromise":  # (R31's: once a history)
        return m.compromised_since is None and (a[0] is None or a[0] in m.vendor)
    if s.op == "bmark":  # since the import that brought a[0], or since now
        return m.marked is None and (a[0] is None or a[0] in m.buyer)
    if s.op in ("update", "monitor", "bwatch"):
        return m.applied > 0
    if s.op == "vckship":  # R31
        return a[0] in m.vchecks and a[0] not in m.buyer
    if s.op == "bvtrust":
        return not m.vtrainer
    if s.op == "lbuy":  # R36: a batch that holds at the vendor, not sealed, not of chat
        x = m.vendor.get(a[0])
        return x is not None and not m.lab and a[0] not in m.revoked | m.erased and not (
            x.sealed or x.variant in TEXT_VARIANTS) and m.compromised_since is None
    if s.op == "lrelay":  # R36: after the buyer applied the vendor's log
        return "lc1" in m.lab and "lc1" not in m.buyer and m.applied > 0
    if s.op == "blab":
        return not m.lab_named
    if s.op == "bpin":
        return "vsuite" in m.buyer and not m.pinned
    if s.op == "bdataset":
        return all(b in m.buyer for b in a[1])
    if s.op == "bapprove":
        return a[0] in m.buyer
    if s.op == "btrain":
        return a[1] in m.buyer and (a[2] is None or a[2] in m.buyer)
    if s.op == "beval":  # a released checkpoint is not evaluated again here (Left)
        return a[1] in m.buyer and (a[2] if len(a) > 2 else "suite") in m.buyer and not any(
            r.kind == "release" and r.dataset == a[1] for r in m.buyer.values())
    if s.op == "brelease":
        return a[1] in m.buyer
    if s.op == "bwithdraw":
        return a[0] in m.buyer and any(not out for _i, _d, out in m.buyer[a[0]].approvals)
    if s.op in ("vapprove", "vtrain"):  # R27: or bought back
        return a[-1] in m.vendor or a[-1] in m.back
    if s.op == "bsell":  # R27: a train set the buyer holds whole (nothing of it erased here)
        return a[0] in m.buyer and not any(m.absent(b, True) for b in m.buyer[a[0]].batches)
    if s.op == "vtrust":
        return not m.trusts_buyer
    if s.op == "vname":  # R30
        return not m.names_approver
    if s.op == "bownsuite":  # R24: only if the buyer holds no suite of that name
        return a[0] not in m.buyer
    if s.op == "vwithdraw":  # (R27: its label bought back or its own)
        return any(not out for _d, out, _i in m.vapprovals.get(a[0], []))
    if s.op in ("brevoke", "berase"):
        return a[0] in m.buyer
    if s.op == "bsame":  # R34: before the vendor's record is here
        return a[0] in m.vendor and a[0] not in m.buyer and all(
            b in m.buyer for b in m.vendor[a[0]].batches)
    return True


def brought(m: Model, label: str, size: int) -> None:
    """What the buyer holds once an import brought the vendor's ``label`` (its lineage), each
    new one at the buyer's log size ``size`` before the import (R10)."""
    for x in lineage(m, label):
        if x not in m.buyer:
            art = m.vendor[x]
            m.buyer[x] = Art(x, art.kind, art.batches, art.split, art.data, art.variant,
                             art.sealed, digest=art.digest, index=size)
        elif m.buyer[x].own and m.buyer[x].second is None:  # R34: a second record
            m.buyer[x].second = size


def digest_of(r: Any) -> str:
    return str(r.stdout.strip().splitlines()[-1])


def perform(run: Run, s: Step, size: int) -> tuple[bool, str]:
    """Do step ``s``; on success record it in the model. (done, why refused)."""
    m, a, v, b = run.model, s.args, run.vendor, run.buyer

    def ok(r: Any) -> tuple[bool, str]:
        return r.exit_code == 0, first_problem(r.stderr) or r.output.strip()[-160:]

    if s.op == "vrecord":
        label, copy, variant, sealed = (*a, None, False)[:4]
        original = m.vendor.get(f"v{copy}") if copy else None  # (R23's v0 is no original)
        data = original.data if original else copy or int(label[1:])
        path = run.root / f"{label}.parquet"
        if variant in TEXT_VARIANTS:  # R28: chat episodes
            path = text_rollouts(path.with_suffix(".jsonl"), data, label, variant)
        elif variant is not None:  # R21: 24-step episodes
            long_rollouts(path, data, label, variant)
        elif not path.exists():
            rollouts(path, data, label)
        r = v.cli("record", path, "--env", "grid@1", "--policy", "scripted", "--name", label,
                  "--licence", "CC-BY-4.0", "--key", "vendor", *("--seal",) * sealed)
        if r.exit_code == 0:
            m.vendor[label] = Art(label, "batch", data=data, digest=digest_of(r),
                                  vindex=v.size() - 1, variant=variant or "orig",
                                  sealed=sealed)
        return ok(r)
    if s.op in ("vdataset", "bdataset"):
        label, members, split = a
        side, arts, key = (v, m.vendor, "vendor") if s.op == "vdataset" else (
            b, m.buyer, "producer")
        r = side.cli("dataset", "create", NAMES.get(label, label), "--version", "1", "--split",
                     split, *[x for mb in members for x in ("--batch", arts[mb].digest)],
                     "--key", key)
        if r.exit_code == 0:
            arts[label] = Art(label, "dataset", members, split, digest=digest_of(r),
                              index=size if side is b else 0, vindex=v.size() - 1)
        return ok(r)
    if s.op == "vrevoke":
        r = v.cli("revoke", m.vendor[a[0]].digest, "--reason", "agree26", "--key", "vendor")
        if r.exit_code == 0:
            m.revoked.add(a[0])
            m.revoked_at.setdefault(a[0], v.size() - 1)  # R33: again, the first
        return ok(r)
    if s.op == "verase":
        r = v.cli("erase", m.vendor[a[0]].digest, "--reason", "consent", "--key", "vendor")
        if r.exit_code == 0:
            m.erased.add(a[0])
            m.erased_at[a[0]] = v.size() - 1
        return ok(r)
    if s.op in ("ship", "update"):
        out = run.root / f"ship-{len(run.ran)}.tar.zst"
        since = ("--updates-since", str(m.since)) if m.applied else ()  # (R36: 0, unread)
        ref = (m.vendor[a[0]].digest,) if s.op == "ship" else ()
        r = v.cli("export", *ref, *since, "--out", out)
        if r.exit_code != 0:
            return ok(r)
        vsize, fresh = v.size(), m.fresh()
        r = b.cli("import", out, "--key", "approver")
        if r.exit_code == 0:
            unapplied(run, r, fresh, size)
            if s.op == "ship":
                brought(m, a[0], size)
            m.applied, m.unread = vsize, False
            m.learn(size)
        return ok(r)
    if s.op in ("monitor", "bwatch"):  # R18: the vendor's log served, watched with the
        vsize, fresh = v.size(), m.fresh()  # approver's key (R31: --fail-on-revocation)
        r = watch(v, b, *("--fail-on-revocation",) * (s.op == "bwatch"))
        if r.exit_code == 0 or "was revoked or erased there" in r.stderr:  # taken in (R31)
            m.applied, m.unread = vsize, False
            m.learn(size)
            unapplied(run, r, fresh, size)
        return ok(r)
    if s.op == "vckship":  # R31: the vendor's checkpoint, its bundle imported by the buyer
        c = m.vchecks[a[0]]
        out = run.root / f"ship-{len(run.ran)}.tar.zst"
        since = ("--updates-since", str(m.since)) if m.applied else ()  # (R36: 0, unread)
        r = v.cli("export", c.digest, *since, "--out", out)
        if r.exit_code != 0:
            return ok(r)
        vsize = v.size()
        r = b.cli("import", out, "--key", "approver")
        if r.exit_code == 0:
            brought(m, c.dataset, size)
            m.buyer[c.dataset].approvals += [  # the approvals it was trained under travel
                [size, d, False] for d, gone, i in m.vapprovals.get(c.dataset, [])
                if i < c.vindex and not gone]
            m.buyer[a[0]] = Art(a[0], "checkpoint", dataset=c.dataset, digest=c.digest,
                                index=size + 1, score=score_of(b, c.digest))
            m.applied, m.unread = vsize, False
            m.learn(size)
        return ok(r)
    if s.op == "bsame":  # R34: the buyer records the vendor's bytes itself, first
        x = m.vendor[a[0]]
        if x.kind == "batch":
            if not run.grid_env:  # (the vendor's environment, as it registered it)
                told = len(b.problems)
                b.cli("env", "register", "grid", "--version", "1", "--source", "sim", "--key",
                      "producer")
                del b.problems[told:]  # (held already, imported: refused, or not)
                run.grid_env = True
            r = b.cli("record", run.root / f"{a[0]}.parquet", "--env", "grid@1", "--policy",
                      "scripted", "--name", a[0], "--licence", "CC-BY-4.0", "--key", "producer")
        else:
            r = b.cli("dataset", "create", a[0], "--version", "1", "--split", "train",
                      *[y for mb in x.batches for y in ("--batch", m.buyer[mb].digest)],
                      "--key", "producer")
        if r.exit_code == 0:
            if digest_of(r) != x.digest:
                run.problems.append(f"{s}: other bytes than the vendor's {a[0]}")
            m.buyer[a[0]] = Art(a[0], x.kind, x.batches, x.split, x.data, x.variant,
                                digest=x.digest, index=size, own=True)
        return ok(r)
    if s.op == "vrotate":  # the vendor's log key handed over to a new one
        r = v.cli("log", "rotate-key")
        m.rotated = m.rotated or r.exit_code == 0
        return ok(r)
    if s.op == "bvtrust":  # R31: a successor naming the vendor's trainer key
        return ok(succeed(run, run.marking, m.rules, m.pinned, vtrainer=True))
    if s.op == "bapprove":
        r = b.cli("approve", m.buyer[a[0]].digest, "--key", "approver", "--note",
                  f"step {len(run.ran)}")  # one statement a step (withdraw26 finding 3)
        if r.exit_code == 0:
            m.buyer[a[0]].approvals.append([size, digest_of(r), False])
        return ok(r)
    if s.op == "vcompromise":  # a successor: vendor2 produces, vendor compromised since K
        since = m.vendor[a[0]].vindex if a[0] else v.size()
        v.cli("key", "new", "vendor2", "--no-encrypt")
        old, new = ((v.home / "keys" / f"{k}.pub").read_text() for k in ("vendor", "vendor2"))
        text = vsucceed(run).replace(old, new) + f'\n[[revoked_keys]]\nkey = """{old}"""\n' \
            f'compromised_since = {since}\nreason = "hist28: stolen laptop"\n'
        assert old in run.vtext
        r = vsucceed(run, text, m.vrules)
        if r.exit_code == 0:
            m.compromised_since, m.declared = since, v.size() - 1
        return ok(r)
    if s.op == "vcontam":  # R25: the vendor's successor with a [contamination] of RULES
        return ok(vsucceed(run, vsucceed(run), RULES[a[0]]))
    if s.op == "brules":  # R24: a successor with the [release] of RELEASES
        return ok(succeed(run, run.marking, m.rules, m.pinned, RELEASES[a[0]]))
    if s.op == "bmark":  # a successor: vendor no producer, compromised since K of this log
        since = m.buyer[a[0]].index if a[0] else size
        r = succeed(run, f'\n[[revoked_keys]]\nkey = "trust/vendor.pub"\ncompromised_since = '
                    f'{since}\nreason = "hist30: the buyer marks it"\n', m.rules, m.pinned)
        if r.exit_code == 0:
            m.marked = since
        return ok(r)
    if s.op == "bcontam":  # R21: a successor with a [contamination] of RULES
        return ok(succeed(run, run.marking, RULES[a[0]], m.pinned))
    if s.op == "bpin":  # R23: a successor pinning suite@1 to the vendor's dataset of the name
        return ok(succeed(run, run.marking, m.rules, True))
    if s.op in ("vtrust", "bsell", "vname"):  # R27, R30
        return buy_back(run, s)
    if s.op in ("lbuy", "blab", "lrelay"):  # R36
        return relay(run, s, size)
    if s.op == "vtrain":  # R26 (R27: on what it bought back too)
        label, ds = a
        seed = label[2:] if label.startswith("vc") else str(500 + int(label[2:]))  # (vb: R27)
        r = v.cli("train", "--dataset", m.v_art(ds).digest, "--key", "vtrainer", "--name",
                  label, "--version", "1",
                  *sft(run, [m.v_art(x) for x in m.v_art(ds).batches], label, seed))
        if r.exit_code == 0:
            m.vchecks[label] = Art(label, "checkpoint", dataset=ds, digest=digest_of(r),
                                   vindex=v.size() - 1)
        return ok(r)
    if s.op in ("bown", "bownsuite"):  # R24: a batch the buyer records (and its suite)
        label, batch = (None, *a)[-2:]
        if not run.own_env:
            b.cli("env", "register", "own", "--version", "1", "--source", "sim", "--key",
                  "producer")
            run.own_env = True
        path = long_rollouts(run.root / f"{batch}.parquet", int(batch[1:]), batch, "orig")
        r = b.cli("record", path, "--env", "own@1", "--policy", "scripted", "--name", batch,
                  "--licence", "CC-BY-4.0", "--key", "producer")
        if r.exit_code == 0:
            m.buyer[batch] = Art(batch, "batch", data=int(batch[1:]), digest=digest_of(r),
                                 index=size)
        if r.exit_code == 0 and label:
            r = b.cli("dataset", "create", label, "--version", "1", "--split", "holdout",
                      "--batch", m.buyer[batch].digest, "--key", "producer")
            if r.exit_code == 0:
                m.buyer[label] = Art(label, "dataset", (batch,), "holdout",
                                     digest=digest_of(r), index=size)
        return ok(r)
    if s.op == "vapprove":
        r = v.cli("approve", m.v_art(a[0]).digest, "--key", "vapprover", "--note",
                  f"step {len(run.ran)}")
        if r.exit_code == 0:
            m.vapprovals.setdefault(a[0], []).append([digest_of(r), False, v.size() - 1])
        return ok(r)
    if s.op == "vwithdraw":
        newest = [x for x in m.vapprovals[a[0]] if not x[1]][-1]
        r = v.cli("revoke", newest[0], "--reason", "hist28 withdraws", "--key", "vapprover")
        if r.exit_code == 0:
            newest[1] = True
            m.vwithdrawn_at.append(v.size() - 1)
        return ok(r)
    if s.op == "bwithdraw":  # its newest that counts
        newest = [x for x in m.buyer[a[0]].approvals if not x[2]][-1]
        r = b.cli("revoke", newest[1], "--reason", "hist28 withdraws", "--key", "approver")
        if r.exit_code == 0:
            newest[2] = True
        return ok(r)
    if s.op in ("brevoke", "berase"):
        verb, why, done = ("revoke", "hist28", m.own_revoked) if s.op == "brevoke" else (
            "erase", "consent", m.own_erased)
        r = b.cli(verb, m.buyer[a[0]].digest, "--reason", why, "--key", "approver")
        if r.exit_code == 0:
            done.add(a[0])
        return ok(r)
    if s.op == "beval":
        label, ck, suite, key = (*a, *("suite", "evaluator")[len(a) - 2:])
        on = m.buyer[suite].digest if suite in NAMES else f"{suite}@1"  # R23: not by name
        r = b.cli("eval", m.buyer[ck].digest, "--suite", on, "--key", key,
                  "--", sys.executable, run.root / "judge.py")
        if r.exit_code == 0:
            m.buyer[label] = Art(label, "evaluation", dataset=ck, digest=digest_of(r),
                                 index=size, suite=suite)
        return ok(r)
    if s.op == "brelease":
        label, ck = a
        parent = m.buyer[ck].parent  # what the release cites (R16, R23, R24: the parent's
        evals = tuple(m.latest(c, x) for x in m.suites  # only under a max_drop)
                      for c in (ck, parent if m.drop is not None else None) if c)
        r = b.cli("release", m.buyer[ck].digest, "--key", "approver")
        if r.exit_code == 0:
            m.buyer[label] = Art(label, "release", dataset=ck, evals=evals,
                                 digest=digest_of(r), index=size)
        return ok(r)
    if s.op == "btrain":
        label, ds, parent = a
        r = b.cli("train", "--dataset", m.buyer[ds].digest, "--key", "trainer", "--name", label,
                  "--version", "1",
                  *(("--parent", m.buyer[parent].digest) if parent else ()),
                  *sft(run, [m.buyer[x] for x in m.buyer[ds].batches], label, label[1:]))
        if r.exit_code == 0:
            m.buyer[label] = Art(label, "checkpoint", dataset=ds, parent=parent,
                                 digest=digest_of(r), index=size,
                                 score=score_of(b, digest_of(r)))
        return ok(r)
    raise AssertionError(s.op)


def unapplied(run: Run, r: Any, fresh: set[str], size: int) -> None:
    """R31 (out36): an update or ``monitor`` after the buyer's marking (R20) that takes in the
    vendor's revocation or erasure of what the buyer holds says it is not applied here, with
    what to do (`WARNING: not applied here: … revoked its own …`); the vendor's compromise
    (R15) aside, and what the lab's relay brought first (R36: not the vendor's own, "one you
    got from its log first", docs/third-party.md: a ``NOTE``; hist41, seed 234)."""
    m = run.model
    fresh = {x for x in fresh if not m.relayed.get(x)}
    if fresh and m.marked is not None and m.marked <= size and m.compromised_since is None \
            and "WARNING: not applied here" not in r.stderr:
        run.problems.append(f"{run.ran and 'after ' + run.ran[-1]}: the vendor's revocation or "
                            f"erasure of {sorted(fresh)} taken in, ignored under the marking, "
                            f"without 'WARNING: not applied here':\n{r.stderr[-400:]}")


SFT = """\
import hashlib, os, pathlib, sys
data, out = (pathlib.Path(os.environ[k]) for k in ("TRAJLEDGER_DATA_DIR", "TRAJLEDGER_OUTPUT_DIR"))
(out / "model.txt").write_text(hashlib.sha256((data / "manifest.json").read_bytes()).hexdigest()
                               + sys.argv[1])
"""
"""R28: a training COMMAND for chat data (docs/trainers.md ``train -- COMMAND``; the built-in
``bc`` learns from observations and actions only, and refuses chat messages after the gate)."""


def sft(run: Run, batches: list[Art], label: str, seed: str) -> tuple[str | Path, ...]:
    """``--seed SEED`` (the built-in trainer: one checkpoint a run, its bytes), or R28's
    ``-- python sft.py LABEL`` when a batch of the set is of chat episodes."""
    if not any(x.variant in TEXT_VARIANTS for x in batches):
        return ("--seed", seed)
    (run.root / "sft.py").write_text(SFT)
    return ("--", sys.executable, run.root / "sft.py", label)


def buy_back(run: Run, s: Step) -> tuple[bool, str]:
    """R27: ``vtrust``, the vendor's approver sets a successor naming the buyer's producer key
    (a producer) and the buyer's log (its ``vkeys``); ``bsell``, the buyer exports its train
    set (with ``--updates-since`` the buyer's log size the vendor applied, once it applied one)
    and the vendor imports it, signed by its approver; on success the model's follows."""
    m, v, b = run.model, run.vendor, run.buyer
    if s.op == "vtrust":
        pem = (b.home / "keys" / "producer.pub").read_text()
        text = vsucceed(run).replace("[roles.producer]\nkeys = [\n",
                                     f'[roles.producer]\nkeys = [\n  """{pem}""",\n', 1)
        text = text.replace("vkeys = [", f'vkeys = ["{b.vkey()}", ', 1)
        assert text.count(pem) == 1 and b.vkey() in text
        r = vsucceed(run, text, m.vrules)
        m.trusts_buyer = m.trusts_buyer or r.exit_code == 0
        return r.exit_code == 0, first_problem(r.stderr) or r.output.strip()[-160:]
    if s.op == "vname":  # R30: the buyer's approver in the vendor's approver role
        pem = (b.home / "keys" / "approver.pub").read_text()
        text = vsucceed(run).replace("[roles.approver]\nkeys = [\n",
                                     f'[roles.approver]\nkeys = [\n  """{pem}""",\n', 1)
        assert text.count(pem) == 1
        r = vsucceed(run, text, m.vrules)
        m.names_approver = m.names_approver or r.exit_code == 0
        return r.exit_code == 0, first_problem(r.stderr) or r.output.strip()[-160:]
    label = s.args[0]
    out = run.root / f"sell-{len(run.ran)}.tar.zst"
    since = ("--updates-since", str(m.bapplied)) if m.bapplied else ()
    bsize = b.size()
    r = b.cli("export", m.buyer[label].digest, *since, "--out", out)
    if r.exit_code == 0:
        r = v.cli("import", out, "--key", "vapprover")
    if r.exit_code == 0:  # the bundle carries its lineage's revocations, and the extension
        took = m.own_revoked & {label, *m.buyer[label].batches}  # every one since (9030)
        took |= m.own_revoked - m.sold_revoked if since else set()
        m.vtook |= {x for x in took if x in m.vendor}
        gone = m.own_erased & {label, *m.buyer[label].batches}  # R30: erasures travel so too
        gone |= m.own_erased - m.sold_erased if since else set()
        m.bapplied, m.sold_revoked, m.sold_erased = bsize, set(m.own_revoked), set(m.own_erased)
        m.sold_own |= {x for x in (label, *m.buyer[label].batches)  # R34 with R27
                       if m.buyer[x].own and x in m.vendor}
        for x in (label, *m.buyer[label].batches):
            if x not in m.vendor and x not in m.back:  # the vendor's own stay its own
                a = m.buyer[x]
                m.back[x] = Art(x, a.kind, a.batches, a.split, a.data, a.variant, a.sealed,
                                digest=a.digest, vindex=v.size() - 1)
        if m.names_approver:  # R30: logged under a policy naming the buyer's approver
            m.vrev_b |= {x for x in took if x in m.vendor or x in m.back}
            m.verase_b |= {x for x in gone if x in m.vendor or x in m.back}
    return r.exit_code == 0, first_problem(r.stderr) or r.output.strip()[-160:]


UNREAD = "has not been read for "
"""R36: `first_contact`'s line for a log marked unread (docs/third-party.md)."""


def relay(run: Run, s: Step, size: int) -> tuple[bool, str]:
    """R36: ``lbuy``, the lab (made at its first step: a buyer of the vendor's, its log
    ``lab.example/log``) imports the vendor's batch, makes a train set of it (``l1``), approves
    it and trains ``lc1`` on it; ``blab``, the buyer's approver sets a successor naming the
    lab's producer, approver and trainer keys and its log; ``lrelay``, the lab exports
    ``lc1`` and the buyer imports it. An import after the buyer applied some of the vendor's
    log (or one that brings the vendor's batch the buyer did not hold) says the vendor's log
    is unread (`UNREAD`: hist42, its keys hold an approver here), and an update of that log
    since the size applied is then refused (``--updates-since 0`` asked); the model's
    follows."""
    m, v, b = run.model, run.vendor, run.buyer
    if run.lab is None and not m.rotated:  # (the template's names the vendor's first key)
        (run.root / "lab-template").rename(run.root / "lab")
        (run.root / "lab-template-state").rename(run.root / "lab-state")
        run.lab = Side.at(run.root, "lab")
    elif run.lab is None:
        run.lab = Side(run.root, "lab")
        make_buyer(run.lab, [v], origin="lab.example/log")
    lab = run.lab
    if s.op == "blab":
        r = succeed(run, run.marking, m.rules, m.pinned, lab=True)
    elif s.op == "lbuy":
        x, made = m.vendor[s.args[0]], ""
        out = run.root / "lab-buys.tar.zst"
        r = v.cli("export", x.digest, "--out", out)
        for args in (("import", out, "--key", "approver"),
                     ("dataset", "create", "l1", "--version", "1", "--split", "train",
                      "--batch", x.digest, "--key", "producer"),
                     ("approve", "l1@1", "--key", "approver"),
                     ("train", "--dataset", "l1@1", "--key", "trainer", "--name", "lc1",
                      "--version", "1", *sft(run, [x], "lc1", "61"))):
            if r.exit_code:
                break
            r = lab.cli(*args)
            made = digest_of(r) if args[0] == "dataset" and r.exit_code == 0 else made
        if r.exit_code == 0:
            m.lab["l1"] = Art("l1", "dataset", (x.label,), digest=made)
            m.lab["lc1"] = Art("lc1", "checkpoint", dataset="l1", digest=digest_of(r))
    else:
        out = run.root / "lab-relays.tar.zst"
        r = lab.cli("export", m.lab["lc1"].digest, "--out", out)
        if r.exit_code == 0:
            r = b.cli("import", out, "--key", "approver")
        if r.exit_code == 0:
            x = m.lab["l1"].batches[0]
            new = x not in m.buyer
            brought(m, x, size)
            m.buyer["l1"] = Art("l1", "dataset", (x,), digest=m.lab["l1"].digest, index=size,
                                approvals=[[size, "lab", False]])
            m.buyer["lc1"] = Art("lc1", "checkpoint", dataset="l1", digest=m.lab["lc1"].digest,
                                 index=size + 1, score=score_of(b, m.lab["lc1"].digest))
            # hist42 (vend41 finding 2): the vendor's approver, an approver here too (R14),
            # signed its policies, which every read of its log takes in: its log is marked for
            # every record another log brings (``l1``, ``lc1``), the batch held here or not
            marks = new or bool(m.applied)
            m.unread = m.unread or marks
            m.relayed[x] = m.relayed.get(x, new)
            taken = m.declared is not None and m.declared < m.applied  # R15 (rev24 finding 1)
            if new and m.stolen(x) and taken and "declares compromised" not in r.stderr:
                run.problems.append(f"lrelay: the vendor's {x}, signed since the compromise the "
                                    f"buyer took in, unnamed:\n{r.stderr[-600:]}")
            if (UNREAD in r.stderr) != marks:
                run.problems.append(f"lrelay: the vendor's {x} {'new' if new else 'held'} here, "
                                    f"the import's lines:\n{r.stderr[-600:]}")
            late = run.root / f"late-{len(run.ran)}.tar.zst"
            if marks and v.cli("export", "--updates-since", str(m.applied), "--out",
                             late).exit_code == 0:
                r2 = b.cli("import", late, "--key", "approver")  # (R35 too: hist40 finding 5)
                if r2.exit_code != 1 or "where it must be read from again" not in r2.stderr:
                    run.problems.append(f"lrelay: an update since {m.applied} imported after "
                                        f"the mark, exit {r2.exit_code}:\n{r2.stderr[-400:]}")
    return r.exit_code == 0, first_problem(r.stderr) or r.output.strip()[-160:]


def contamination(rules: dict[str, Any]) -> str:
    """The ``[contamination]`` table of ``rules`` (one of `RULES`; ``{}``: none)."""
    return "".join("\n[contamination]\n" * (k == next(iter(rules))) + f"{k} = {json.dumps(v)}\n"
                   for k, v in rules.items())


def vsucceed(run: Run, text: str | None = None, rules: dict[str, Any] | None = None) -> Any:
    """The vendor's approver sets ``text`` (its policy at serial 1, the serial set here) with
    ``[contamination]`` ``rules`` (R25) as its successor; the model's follows when it is set.
    Without ``text``: the vendor's policy in force without its ``[contamination]``."""
    if not run.vtext:
        run.vtext = (run.vendor.home / "policy.toml").read_text()
    if text is None:
        return run.vtext
    assert rules is not None and "serial = 1\n" in text
    path = run.vendor.home / f"successor-{run.vserial + 1}.toml"
    path.write_text(text.replace("serial = 1\n", f"serial = {run.vserial + 1}\n", 1)
                    + contamination(rules))
    r = run.vendor.cli("policy", "set", path, "--key", "vapprover", "--yes")
    if r.exit_code == 0:
        run.vserial, run.vtext, run.model.vrules = run.vserial + 1, text, rules
    return r


def succeed(run: Run, marking: str, rules: dict[str, Any], pinned: bool,
            release: tuple[int | None, int | None, tuple[str, ...]] | None = None,
            *, as_json: bool = False, vtrainer: bool = False, lab: bool = False) -> Any:
    """The buyer's approver sets a successor of its policy in force: the first one, without
    ``vendor`` as a producer and with ``marking`` (R20) if any, with ``[contamination]``
    ``rules`` (R21), its requirements on ``suite@1`` pinned to ``vsuite``'s digest when
    ``pinned`` (R23), and the ``[release]`` of ``release`` (R24: the one in force if None);
    the model's follows when it is set."""
    run.serial += 1
    release = run.release if release is None else release
    text = run.policy.read_text().replace("format = 2\n", f"format = 2\nserial = {run.serial}\n", 1)
    drop, least, suites = release
    text = text[:text.index(RELEASE[:20])] + release_text(drop, suites, least)
    if pinned:
        text = text.replace('suite = "suite@1"\n', 'suite = "suite@1"\ndigest = '
                            f'"{run.model.buyer["vsuite"].digest}"\n')
    if vtrainer or run.model.vtrainer:  # R31: the vendor's trainer, a trainer here too
        pem = (run.vendor.home / "keys" / "vtrainer.pub").read_text()
        text = text.replace('"keys/trainer.pub"]', f'"keys/trainer.pub", """{pem}"""]')
        assert pem in text
    if (lab or run.model.lab_named) and run.lab:  # R36: the lab's keys, first in each role
        for role in ("producer", "approver", "trainer"):
            pem = (run.lab.home / "keys" / f"{role}.pub").read_text()
            if pem not in text:
                text = text.replace(f"[roles.{role}]\nkeys = [",
                                    f'[roles.{role}]\nkeys = ["""{pem}""", ', 1)
                assert pem in text
        if (vkey := run.lab.vkey()) not in text:
            text = text.replace("vkeys = [", f'vkeys = ["{vkey}", ', 1)
    if marking:
        text = text.replace('"trust/vendor.pub", ', "")
        assert text.count("trust/vendor.pub") == 0
    path = run.buyer.home / f"successor-{run.serial}.toml"
    path.write_text(text + marking + contamination(rules))
    r = run.buyer.cli("policy", "set", path, "--key", "approver", "--yes",
                      *(["--json"] if as_json else []))
    if r.exit_code == 0:
        run.model.rules, run.model.pinned, run.marking = rules, pinned, marking
        run.release = release
        run.model.drop, run.model.least, run.model.suites = release
        run.model.vtrainer = run.model.vtrainer or vtrainer
        run.model.lab_named = run.model.lab_named or lab
        run.successor = path if marking else None
    else:
        run.serial -= 1
    return r


def watch(vendor: Side, buyer: Side, *more: str) -> Any:
    """``monitor URL --vkey V --key approver`` at ``buyer`` of ``vendor``'s log, served (as
    ``log serve`` does, with the envelopes its policy publishes, by default) in this process
    for the one command."""
    from trajledger import Ledger
    from trajledger.ledger.serve import LogServer, Published
    from trajledger.verify.policy_settings import DEFAULT_PUBLISH

    before = os.environ.get("TRAJLEDGER_STATE_DIR")
    os.environ["TRAJLEDGER_STATE_DIR"] = str(vendor.state)  # the vendor's own, as its serve
    try:
        ledger = Ledger.open(vendor.home)
        server = LogServer(ledger.log.directory,
                           published=Published(ledger.log.directory, ledger.store.get,
                                               DEFAULT_PUBLISH))
        vkey = ledger.log.vkey
    finally:
        if before is None:
            del os.environ["TRAJLEDGER_STATE_DIR"]
        else:
            os.environ["TRAJLEDGER_STATE_DIR"] = before
    server.start(poll_interval=0.02)
    try:
        return buyer.cli("monitor", server.url, "--vkey", vkey, "--key", "approver", *more)
    finally:
        server.stop()


def replay(run: Run, steps: list[Step]) -> None:
    for s in steps:
        if s.op in ("max_drop", "two_suites") or not refs(run.model, s):
            continue
        size = run.buyer.size()
        want = expect(run.model, s, size)
        got, why = perform(run, s, size)
        run.ran.append(f"{s} -> {'ok' if got else 'refused: ' + why}")
        if want is not None and want != got:
            run.problems.append(f"step {s}: {'done' if got else 'refused'}, the rules say "
                                f"{'do' if want else 'refuse'} it{': ' + why if not got else ''}")


# -- judging -------------------------------------------------------------------------------------


def cli_verdict(side: Side, *args: str | Path) -> tuple[bool, str]:
    r = side.cli(*args)
    return r.exit_code == 0, first_problem(r.stderr)


def bundle_verdicts(run: Run, side: Side, digest: str, tag: str) -> dict[str, tuple[bool, str]]:
    """``export DIGEST`` at ``side``, then both verifiers under the buyer's policy."""
    from trajledger.verify.__main__ import main as verify_main

    bundle = run.root / f"judge-{tag}-{digest[7:19]}.tar.zst"
    # R20: a vendor's log holds none of the buyer's policies: its bundles are verified under the
    # buyer's policy in force; the buyer's own carry its history (the first one follows it).
    policy = run.successor if side is run.vendor and run.successor else run.policy
    # The buyer's ledger holds the vendor's log at the size it applied: a newer bundle
    # proves its consistency with it (docs/third-party.md; else "fork or rollback").
    since = ("--consistency-from", str(run.model.applied)) if side is run.vendor and \
        run.model.applied else ()
    r = side.cli("export", digest, *since, "--out", bundle)
    if r.exit_code != 0:
        return {f"{tag} export": (False, first_problem(r.stderr) or f"exit {r.exit_code}")}
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = verify_main([str(bundle), "--policy", str(policy)])
    if code not in (0, 1):
        run.problems.append(f"python -m trajledger.verify {tag}: exit {code}\n"
                            f"{err.getvalue()[-600:]}")
    return {f"{tag} verify BUNDLE": cli_verdict(run.buyer, "verify", bundle, "--policy",
                                                policy),
            f"{tag} python -m trajledger.verify": (code == 0, first_problem(err.getvalue()))}


def files_of(side: Side, digest: str) -> set[str]:
    """The files the manifest ``digest`` lists that ``side``'s store holds."""
    def path(d: str) -> Path:
        return side.home / "objects" / "sha256" / d[7:9] / d[9:11] / d[7:]

    listed = json.loads(path(digest).read_text())["files"]
    return {d for f in listed if path(d := "sha256:" + f["digest"]["sha256"]).exists()}


def checkpoint_files(side: Side, digest: str) -> str:
    """The checkpoint ``digest``'s files as `JUDGE` hashes them: their digests, sorted, joined
    (from its manifest)."""
    path = side.home / "objects" / "sha256" / digest[7:9] / digest[9:11] / digest[7:]
    return " ".join(sorted(f["digest"]["sha256"] for f in json.loads(path.read_text())["files"]))


def score_of(side: Side, digest: str) -> int:
    """`JUDGE`'s score of the checkpoint ``digest`` in tenths, from its files and the run's
    ``score-salt`` (none in a random history)."""
    import hashlib

    salted = side.root / "score-salt"
    salt = salted.read_text() if salted.is_file() else ""
    text = salt + checkpoint_files(side, digest)
    return 5 + int(hashlib.sha256(text.encode()).hexdigest(), 16) % 5


def salt_for(keys: list[str], scores: list[int]) -> str:
    """A ``score-salt`` under which checkpoints of files ``keys`` (`checkpoint_files`) score
    ``scores``: a hand history that needs given scores gets them on any machine (the built-in
    trainer's bytes follow the machine's numpy build and CPU, so one machine's scores from the
    bytes alone are not another's)."""
    import hashlib

    for n in range(100_000):
        if [5 + int(hashlib.sha256((str(n) + k).encode()).hexdigest(), 16) % 5
                for k in keys] == scores:
            return str(n)
    raise AssertionError(f"no salt scores {scores}")


def judge_history(run: Run, only: set[str] | None = None) -> list[str]:
    """Every path of the buyer (and the vendor's newest bundles, its gate) against the model,
    for every artifact, or those of ``only`` (hist42: a hand history's judgement before its
    last steps, of what they change; the others' paths are judged at its end)."""
    m, b, out = run.model, run.buyer, []
    now = b.size()

    def of(arts: Any) -> list[Art]:
        return [a for a in arts if only is None or a.label in only]

    def compare(label: str, got: dict[str, tuple[bool, str]], want: bool) -> None:
        out.extend(f"{label} {path}: {'accept' if o[0] else 'refuse (' + o[1] + ')'}, the rules "
                   f"say {'accept' if want else 'refuse'}" for path, o in got.items()
                   if o[0] != want)

    for a in of(m.buyer.values()):
        if a.second is not None:  # R34: by name, the buyer's own record (the first)
            compare(a.label, {"verify NAME": cli_verdict(
                b, "verify", a.label + "@1" * (a.kind == "dataset"))}, m.record_ok(a.label, True))
        if a.kind == "batch":
            compare(a.label, {"verify BATCH": cli_verdict(b, "verify", a.digest),
                              "impact BATCH (its node)": impact_verdict(b, a.digest, a.digest)},
                    m.batch_ok(a.label))
        elif a.kind == "dataset":
            compare(a.label, {"admit": cli_verdict(b, "admit", a.digest)}, m.admit(a.label, now))
            compare(a.label, {"verify DS": cli_verdict(b, "verify", a.digest),
                              **bundle_verdicts(run, b, a.digest, "buyer")},
                    m.record_ok(a.label))
        elif a.kind == "evaluation":
            compare(a.label, {"verify EVAL": cli_verdict(b, "verify", a.digest),
                              "lineage EVAL": cli_verdict(b, "lineage", a.digest),
                              "impact CK (its node)": impact_verdict(
                                  b, m.buyer[a.dataset].digest, a.digest)},
                    m.evaluation_ok(a.label))
        elif a.kind == "release":
            compare(a.label, {"verify RELEASE": cli_verdict(b, "verify", a.digest),
                              "lineage RELEASE": cli_verdict(b, "lineage", a.digest),
                              "impact CK (its node)": impact_verdict(
                                  b, m.buyer[a.dataset].digest, a.digest),
                              **bundle_verdicts(run, b, a.digest, "buyer")},
                    m.release_ok(a.label))
        else:
            first = m.buyer[m.buyer[a.dataset].batches[0]].digest
            compare(a.label, {"verify": cli_verdict(b, "verify", a.digest),
                              "lineage": cli_verdict(b, "lineage", a.digest),
                              "impact": impact_verdict(b, first, a.digest),
                              **bundle_verdicts(run, b, a.digest, "buyer")},
                    m.checkpoint_ok(a.label))
            compare(a.label, {"verify NAME": cli_verdict(b, "verify", f"{a.label}@1"),
                              "lineage NAME": cli_verdict(b, "lineage", f"{a.label}@1")}
                    if len(m.claims(a.label)) > 1 else {"verify NAME": cli_verdict(
                        b, "verify", f"{a.label}@1")}, m.checkpoint_ok(a.label, True))
    for a in of(m.vendor.values()):
        if (ok := m.v_bundle_ok(a.label)) is not None:  # (either: R34 with R27)
            compare(a.label, bundle_verdicts(run, run.vendor, a.digest, "vendor's newest"),
                    ok and not m.v_disowned(a.label))  # R20; R27; R29
    for a in of(m.vendor.values()):  # R26: the vendor's gate
        if a.kind == "dataset":
            compare(a.label, {"admit at the vendor": cli_verdict(run.vendor, "admit", a.digest)},
                    m.v_admit(a.label))
    for a in of(m.back.values()):  # R27: what the vendor bought back, at its gate
        if a.kind == "dataset":
            compare(a.label, {"admit at the vendor (bought back)": cli_verdict(
                run.vendor, "admit", a.digest)}, m.v_admit(a.label))
    for a in of(m.vchecks.values()):
        compare(a.label, {"verify at the vendor": cli_verdict(run.vendor, "verify", a.digest)},
                m.v_checkpoint_ok(a.label))
    for a in m.buyer.values():  # R13: erased bytes stay gone (hist28 finding 1)
        if a.kind == "batch" and m.files_gone(a.label) and (back := files_of(b, a.digest)):
            out.append(f"{a.label} store: {len(back)} file(s) of it are back after its erasure")
    for a in [*m.vendor.values(), *m.back.values()]:  # R27: and at the vendor, whatever the
        if a.kind == "batch" and a.label in m.erased | m.verase_b and (  # buyer sells back
                back := files_of(run.vendor, a.digest)):  # (R30: or the buyer's approver erased)
            out.append(f"{a.label} vendor's store: {len(back)} file(s) of it are back after its "
                       "erasure")
    return out + run.problems + run.vendor.problems + run.buyer.problems


def run_history(root: Path, steps: list[Step], salt: str | None = None) -> Run:
    """``steps`` run by a new vendor and buyer at ``root``, the judge's ``score-salt`` ``salt``
    (`salt_for`) if given."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    if salt is not None:
        (root / "score-salt").write_text(salt)
    max_drop = any(s.op == "max_drop" for s in steps)
    suites = ("suite", "suite2") if any(s.op == "two_suites" for s in steps) else ("suite",)
    vendor, buyer = make_parties(root, max_drop, suites)
    run = Run(vendor, buyer, root)
    run.model.drop, run.model.suites = 2 if max_drop else None, suites
    run.release = (run.model.drop, None, suites)
    replay(run, steps)
    return run


def fork(run: Run, root: Path) -> Run:
    """A copy of ``run`` at ``root`` (its parties' ledgers and user states, the model, what
    ran), to go on from where it is otherwise (hist42: a prefix two hand histories share run
    once)."""
    import copy

    from testkit import release_files

    release_files(run.root)  # (its SQLite connections closed: the copy whole)
    shutil.copytree(run.root, root)
    other = copy.deepcopy(run)
    other.root = root
    for name in ("vendor", "buyer", "lab"):
        if (side := getattr(run, name)) is not None:
            setattr(other, name, Side.at(root, side.name))
            getattr(other, name).problems = list(side.problems)
    other.successor = root / run.successor.name if run.successor else None
    return other


def check(root: Path, seed: int, extra: bool = True, new: bool = True) -> list[str]:
    steps = generate(seed, extra, new)
    run = run_history(root, steps)
    problems = judge_history(run)
    if not problems:
        return []
    small, run = minimise(root, steps, problems[0])
    return [f"history {seed} (minimised from {len(steps)} to {len(small)} steps):",
            *(f"  {line}" for line in run.ran), "disagreements:",
            *(f"  {p}" for p in judge_history(run))]


def minimise(root: Path, steps: list[Step], problem: str) -> tuple[list[Step], Run]:
    """Drop steps one at a time while the same path still disagrees on the same artifact."""
    key = " ".join(problem.split()[:2])
    best = steps
    for i in range(len(best) - 1, -1, -1):
        trial = best[:i] + best[i + 1:]
        if any(p.startswith(key) for p in judge_history(run_history(root, trial))):
            best = trial
    return best, run_history(root, best)


CI_SEEDS = (15, 16)
"""The histories CI runs: each reaches checkpoints (two each), 15 evaluates and releases,
both take a vendor's revocation or erasure in, 16 ends with one the buyer has not taken in.
agree26 chose six; hist32 left out 6, 11, 12 and 20 (12 evaluated and released, 6 and 20
took a revocation or erasure in, 20 ended with one not taken in, as 15 and 16 do) to pay for
its hand histories."""
CI_EXTRA = (376,)
"""The histories with the steps of R13 to R20 CI runs (hist28), chosen from seeds 300 to 850
(one in ten of which trains a checkpoint): 331 takes in the vendor's key compromise after
training on what the key signed, and releases; 376 withdraws the approval a checkpoint was
trained under, erases a batch at the buyer and requires two suites; 767 released under
``max_drop`` on two suites. Since hist30 331 and 376 take an update by ``monitor`` and one by
import (R18), and 767's buyer marks the vendor's key at its sixth step (R20): the five steps
after that need the vendor's data are refused, its training and release among them (the
release under ``max_drop`` is `test_a_release_is_refused_for_a_real_drop_only`'s). Since
hist32 they run without hist32's steps (``new`` False), as hist30 ran them. hist33 left 767
out to pay for its hand histories: its marking is `test_the_buyers_own_compromise_marking`'s
(a marking after training, a ship refused after it), its release under ``max_drop`` the
drop test's. hist42 (what they reach today, run and read: the generator changed under them):
331 declares the vendor's key compromised after the buyer's last import and trains three
checkpoints, evaluates and releases without taking the declaration in (its newest bundles,
R15's vendor side, judge it); 376 trains one checkpoint, withdraws its approval, takes ``v1``'s
revocation in by ``monitor`` and by an update and evaluates nothing. R15 at the buyer and R17's
release on two suites are `test_a_release_on_two_suites_then_the_vendors_key_compromise_taken_in`'s.
15 trains two checkpoints, evaluates and releases and then takes in the revocation that fails
them; 16 trains nothing: a revocation taken in, then a revocation and an erasure not. hist42
left 331 out (most of chunk 0's 6.9 CPU-s with 15): its compromise, declared and judged by
the vendor's newest bundles, is that hand history's (judged after the declaration, and taken
in), its checkpoints, evaluation and release 15's, its parent checkpoint the drop test's."""
CI_NEW: tuple[int, ...] = ()
"""The histories with hist32's steps too (R21 to R23) CI runs: none; the hand histories
`test_contamination_rules_across_organisations` and `test_a_sealed_suite_across_organisations`
take their place (hist32)."""
N = os.environ.get("TRAJLEDGER_EXCHANGE_N")
ONE = os.environ.get("TRAJLEDGER_EXCHANGE_SEED")
SEEDS = [(int(ONE), True, True)] if ONE else [(s, True, True) for s in range(int(N))] if N else [
    *((s, False, False) for s in CI_SEEDS), *((s, True, False) for s in CI_EXTRA),
    *((s, True, True) for s in CI_NEW)]


@pytest.fixture(scope="module", autouse=True)
def _parties_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """`PARTIES` built under the test session's directory (hist42)."""
    PARTIES.clear()
    PARTIES_DIR[:] = [tmp_path_factory.mktemp("parties")]
    yield
    PARTIES.clear()
    PARTIES_DIR.clear()


@pytest.fixture(autouse=True)
def _no_shared_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAJLEDGER_STATE_DIR", str(tmp_path / "nobody-state"))


@pytest.mark.parametrize("chunk", range(2))
def test_generated_exchange_histories_agree_with_the_rules(chunk: int, tmp_path: Path) -> None:
    """Each seed of `SEEDS` (half per test, for ``-n 2``): every path of the buyer, and the
    vendor's newest bundles under the buyer's policy, answer as `Model` says."""
    failures: list[str] = []
    for seed, extra, new in SEEDS[chunk::2]:
        failures += check(tmp_path / f"h{seed}", seed, extra, new)
    assert not failures, "\n".join(failures)


def test_an_erased_suite_is_refused_by_eval_not_read(tmp_path: Path) -> None:
    """agree26 finding 1 (history S6, minimised): the vendor erases the batch of the buyer's
    suite, the buyer takes the erasure in (an update bundle) and its copy of the bytes is
    deleted; ``eval CK --suite suite@1`` then verified the suite (an erasure keeps the
    digests) and went on to read it: ``FAIL: object sha256:…: not in the store``, exit 3, an
    operational failure that names no erasure. It now refuses before reading, exit 1, naming
    the erasure, as ``train`` refuses erased data; `judge_history` agrees with the model
    (R11, R12) on every path."""
    steps = [Step("vrecord", ("v1", 0)), Step("vrecord", ("v2", 0)), Step("ship", ("v1",)),
             Step("ship", ("v2",)), Step("bdataset", ("suite", ("v2",), "holdout")),
             Step("bdataset", ("d1", ("v1",), "train")), Step("bapprove", ("d1",)),
             Step("btrain", ("c1", "d1", None)), Step("verase", ("v2",)), Step("update"),
             Step("beval", ("e1", "c1"))]
    run = run_history(tmp_path / "h", steps)
    assert run.ran[-1].startswith("beval(e1, c1) -> refused: "), run.ran
    r = run.buyer.cli("eval", "c1@1", "--suite", "suite@1", "--key", "evaluator", "--",
                      sys.executable, run.root / "judge.py")
    assert r.exit_code == 1, r.output
    assert re.search(r"FAIL: evaluation of c1@1 on suite@1 > suite: dataset suite@1 \(sha256:"
                     r"\w{12}…\): batch sha256:\w{12}… is erased: consent \(log index \d+\): "
                     "nothing of it to evaluate on", r.stderr), r.stderr
    assert judge_history(run) == []


def test_the_buyers_own_compromise_marking(tmp_path: Path) -> None:
    """R18, R20: the buyer trains ``c1`` on ``w1`` and ``c2`` on ``v2``, shipped after, then marks
    the vendor's key compromised since the import of ``v2``: ``c1`` holds, ``c2`` fails; a later
    ship is refused, and the vendor's revocation of ``v1``, taken in by ``monitor``, counts for
    nothing (signed by that key since); every path agrees with the model."""
    steps = [Step("vrecord", ("v1", 0)), Step("vrecord", ("v2", 0)), Step("vrecord", ("v3", 0)),
             Step("vdataset", ("w1", ("v1",), "train")), Step("ship", ("w1",)),
             Step("bapprove", ("w1",)), Step("btrain", ("c1", "w1", None)),
             Step("ship", ("v2",)), Step("bdataset", ("d2", ("v2",), "train")),
             Step("bapprove", ("d2",)), Step("btrain", ("c2", "d2", None)),
             Step("bmark", ("v2",)), Step("ship", ("v3",)), Step("vrevoke", ("v1",)),
             Step("monitor")]
    run = run_history(tmp_path / "h", steps)
    assert [r.split(" -> ")[1][:7] for r in run.ran[-4:]] == ["ok", "refused", "ok", "ok"], run.ran
    m = run.model
    assert (m.checkpoint_ok("c1"), m.checkpoint_ok("c2"), m.batch_ok("v1")) == (True, False, True)
    assert judge_history(run) == []


def test_a_release_on_two_suites_then_the_vendors_key_compromise_taken_in(
        tmp_path: Path) -> None:
    """R15 at the buyer, R17 (hist42): no CI seed reaches them any more (with today's generator
    331 declares the vendor's key compromised but the buyer never takes it in, and 376, with two
    suites, evaluates nothing: `CI_EXTRA`). The buyer trains ``c1`` on ``v1`` and requires two
    suites: a release with ``suite@1``'s evaluation only is refused (``r0``), one with both
    done (``r1``, which ``verify`` accepts). The vendor then declares ``vendor`` compromised
    since ``v1``'s record, and the update that takes the successor in revokes here what the key
    signed since (``v1`` and the suites' batches): ``c1``, both evaluations and ``r1`` fail.
    Every path agrees with the model."""
    steps = [Step("two_suites"), *(Step("vrecord", (f"v{i}", 0)) for i in (1, 2, 3)),
             *(Step("ship", (f"v{i}",)) for i in (1, 2, 3)),
             Step("bdataset", ("suite", ("v2",), "holdout")),
             Step("bdataset", ("suite2", ("v3",), "holdout")),
             Step("bdataset", ("d1", ("v1",), "train")), Step("bapprove", ("d1",)),
             Step("btrain", ("c1", "d1", None)), Step("beval", ("e1", "c1")),
             Step("brelease", ("r0", "c1")), Step("beval", ("e2", "c1", "suite2")),
             Step("brelease", ("r1", "c1"))]
    run = run_history(tmp_path / "h", steps)
    refused = [r.split(" -> ")[0] for r in run.ran if " -> refused" in r]
    assert refused == ["brelease(r0, c1)"] and not run.problems, run.ran
    m = run.model
    assert run.buyer.cli("verify", m.buyer["r1"].digest).exit_code == 0 and m.release_ok("r1")
    replay(run, [Step("vcompromise", ("v1",)), Step("update")])
    assert all(r.endswith("-> ok") for r in run.ran[-2:]), run.ran
    assert m.stolen_here == {"v1", "v2", "v3"} and not m.release_ok("r1"), m.stolen_here
    assert judge_history(run) == []


def test_contamination_rules_across_organisations(tmp_path: Path) -> None:
    """R21 (hist32): the buyer holds out the vendor's ``v1`` and buys the vendor's train sets
    of its copies: ``w1`` a near one (``n1``) and an unrelated batch, ``w2`` one cut (a run of
    21 steps shared). Under the default rules ``w1`` is trained on and ``w2`` refused; the
    buyer's successor policies refuse near copies (``c2`` refused, ``c1`` still holds: the
    verifiers read no episodes), then only near runs (``w2`` admitted, ``w1`` too), then near
    copies at ``numeric_threshold = 0.9`` (``d3`` of the far copy ``n2`` refused, ``d4`` of the
    unrelated batch made); every step and path agrees with the model."""
    steps = [Step("vrecord", ("v1", 0, "orig", False)), Step("vrecord", ("v2", 1, "n1", False)),
             Step("vrecord", ("v3", 1, "cut", False)), Step("vrecord", ("v4", 1, "n2", False)),
             Step("vrecord", ("v5", 0, "orig", False)), Step("ship", ("v1",)),
             Step("bdataset", ("h1", ("v1",), "holdout")),
             Step("vdataset", ("w1", ("v2", "v5"), "train")),
             Step("vdataset", ("w2", ("v3",), "train")), Step("ship", ("w1",)),
             Step("ship", ("w2",)), Step("bapprove", ("w1",)), Step("bapprove", ("w2",)),
             Step("btrain", ("c1", "w1", None)), Step("btrain", ("c9", "w2", None)),
             Step("bcontam", (1,)), Step("btrain", ("c2", "w1", None)),
             Step("bcontam", (3,)), Step("btrain", ("c3", "w2", None)),
             Step("ship", ("v4",)), Step("bcontam", (2,)),
             Step("bdataset", ("d3", ("v4",), "train")),
             Step("bdataset", ("d4", ("v5",), "train"))]
    run = run_history(tmp_path / "h", steps)
    refused = [r.split(" -> ")[0] for r in run.ran if " -> refused" in r]
    assert refused == ["btrain(c9, w2, None)", "btrain(c2, w1, None)",
                       "bdataset(d3, ('v4',), train)"], run.ran
    assert (run.model.checkpoint_ok("c1"), run.model.admit("w1", run.buyer.size())) == (
        True, False)
    assert judge_history(run) == []


def test_a_sealed_suite_across_organisations(tmp_path: Path) -> None:
    """R22, R23 (hist32): the vendor seals ``v2`` to the buyer's evaluator's X25519 key and
    names its holdout of it ``suite@1``, as the buyer's suite (``vsuite``); no one trains on
    ``v2`` (``w1`` refused at the vendor, ``d2`` at the buyer). A copy of its episodes cut
    (``v4``) is not found (a sealed batch publishes no runs of steps: ``c1`` and ``c2`` are
    trained on it), a near one (``v3``) is once the buyer's rules refuse near copies. An
    evaluation on ``vsuite`` is recorded but releases nothing (``r1``) until the buyer's
    policy pins ``suite@1`` to it; ``evaluator2`` cannot open it (nothing logged). The
    buyer's own ``suite@1`` releases ``c2`` meanwhile, a release the pinned successor fails
    (the rules in force judge every release: SECURITY.md twelfth round, "a successor policy
    raising the bar"); ``c1``, trained on ``v4``, a cut copy of the vendor's sealed suite, is
    refused its evaluation on it (R37, evalc46: ``eval`` unseals the suite and finds the run of
    steps) and so never released on it. Every step and path agrees with the model."""
    steps = [Step("vrecord", ("v2", 0, "orig", True)), Step("vrecord", ("v3", 2, "n1", False)),
             Step("vrecord", ("v4", 2, "cut", False)), Step("vrecord", ("v5", 0, "orig", False)),
             Step("vdataset", ("w1", ("v2",), "train")),
             Step("vdataset", ("vsuite", ("v2",), "holdout")),
             *(Step("ship", (x,)) for x in ("vsuite", "v3", "v4", "v5")),
             Step("bdataset", ("d2", ("v2",), "train")),
             Step("bdataset", ("d4", ("v4",), "train")),
             Step("bdataset", ("d3", ("v3",), "train")), Step("bapprove", ("d4",)),
             Step("btrain", ("c1", "d4", None)), Step("btrain", ("c2", "d4", None)),
             Step("beval", ("e1", "c1", "vsuite", "evaluator")), Step("brelease", ("r1", "c1")),
             Step("beval", ("e3", "c1", "vsuite", "evaluator2")),
             Step("bdataset", ("suite", ("v5",), "holdout")),
             Step("beval", ("e2", "c2", "suite", "evaluator")), Step("brelease", ("r2", "c2")),
             Step("bpin"), Step("brelease", ("r3", "c1")), Step("bcontam", (1,)),
             Step("bapprove", ("d3",))]
    run = run_history(tmp_path / "h", steps)
    refused = [r.split(" -> ")[0] for r in run.ran if " -> refused" in r]
    assert refused == ["vdataset(w1, ('v2',), train)", "bdataset(d2, ('v2',), train)",
                       "beval(e1, c1, vsuite, evaluator)", "brelease(r1, c1)",
                       "beval(e3, c1, vsuite, evaluator2)", "brelease(r3, c1)"], run.ran
    m, now = run.model, run.buyer.size()
    assert (m.release_ok("r2"), "r3" in m.buyer, m.admit("d3", now), m.admit("d4", now)) == (
        False, False, False, True)
    assert judge_history(run) == []


def test_a_sealed_held_out_batch_whose_record_no_longer_counts(tmp_path: Path) -> None:
    """hist32 finding 1 (history 1120, minimised): the buyer holds out the vendor's sealed
    ``v4``, then marks the vendor's key compromised since ``v3``'s import, before ``v4``'s:
    ``v4``'s record counts for nothing here, so its published fingerprints cannot be trusted
    and its episodes are ciphertext. ``admit`` of an unrelated train set is refused (fail
    closed), and now says why, where it said only ``object sha256:…: not in the store`` (a
    blob to repair, which ``fsck`` finds whole); the buyer's approver's erasure of ``v4`` ends
    the comparison. Every step and path agrees with the model."""
    steps = [Step("vrecord", ("v1", 0, "orig", False)), Step("ship", ("v1",)),
             Step("bdataset", ("d1", ("v1",), "train")), Step("bapprove", ("d1",)),
             Step("vrecord", ("v3", 0, "orig", False)), Step("ship", ("v3",)),
             Step("vrecord", ("v4", 0, "orig", True)), Step("ship", ("v4",)),
             Step("bdataset", ("h1", ("v4",), "holdout")), Step("bmark", ("v3",))]
    run = run_history(tmp_path / "h", steps)
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    m, d1 = run.model, run.model.buyer["d1"].digest
    r = run.buyer.cli("admit", d1)
    assert r.exit_code == 1 and not m.admit("d1", run.buyer.size()), r.output
    assert re.search(r"cannot be checked: holdout/regression batch sha256:\w{12}…: object "
                     r"sha256:\w{64}: not in the store; its record does not verify \(.*\), so "
                     "what a sealed batch publishes to compare with cannot be trusted; an "
                     "approver's erasure of it ends the comparison", r.stderr), r.stderr
    assert judge_history(run, {"d1", "v4", "h1"}) == []  # (what the erasure changes; hist42)
    replay(run, [Step("berase", ("v4",))])
    assert run.buyer.cli("admit", d1).exit_code == 0 and m.admit("d1", run.buyer.size())
    assert judge_history(run) == []


def test_a_held_out_batch_whose_erasure_no_longer_counts(tmp_path: Path) -> None:
    """History 234 (the lead's Left, twentieth round; hist36, minimised): the buyer holds out
    the vendor's ``v4`` (``suite2``); the vendor erases it and the erasure is taken in (its
    files deleted here); the buyer then marks the vendor's key compromised since ``v2``'s
    import, before ``v4``'s: the erasure and ``v4``'s record count for nothing, its bytes stay
    gone, and ``admit`` of the buyer's own unrelated ``d91`` is refused, "cannot be checked"
    (fail closed: R11, R20), where the model said accept. The line now names the holdout and
    the way on that works, an approver's erasure of the batch, with its command; it said
    that a sealed batch's publications could not be trusted, of a batch not sealed. Checked by
    hand, the other ways do not work: the vendor's bundle of ``v4`` is refused under the
    marking (a ``ship``, and one exported before the erasure), and the holdout's revocation or
    erasure by the buyer's approver leaves ``d91`` refused. Every path agrees with the model."""
    steps = [Step("vrecord", ("v2", 0, "orig", False)), Step("ship", ("v2",)),
             Step("vrecord", ("v4", 0, "orig", False)), Step("ship", ("v4",)),
             Step("bdataset", ("suite2", ("v4",), "holdout")), Step("verase", ("v4",)),
             Step("update", ()), Step("bmark", ("v2",)), Step("bown", ("b91",)),
             Step("bdataset", ("d91", ("b91",), "train")), Step("bapprove", ("d91",))]
    run = run_history(tmp_path / "h", steps)
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    m, d91 = run.model, run.model.buyer["d91"].digest
    replay(run, [Step("ship", ("v4",)), Step("brevoke", ("suite2",))])
    assert run.ran[-2].startswith("ship(v4) -> refused") and run.ran[-1] == (
        "brevoke(suite2) -> ok"), run.ran
    r = run.buyer.cli("admit", d91)
    assert r.exit_code == 1 and not m.admit("d91", run.buyer.size()), r.output
    said = " ".join(r.stderr.split())
    assert re.search(r"cannot be checked: holdout/regression batch sha256:\w{12}…: object "
                     r"sha256:\w{64}: not in the store; its record does not verify \(.*"
                     r"compromised since.*\), so nothing this policy trusts says why its bytes "
                     r"are gone", said), said
    assert "sealed" not in said and "held out by holdout suite2@1: an approver's erasure of it " \
        f"ends the comparison (trajledger erase {m.buyer['v4'].digest} --key APPROVER --reason " \
        "REASON); revoking or erasing the holdout does not" in said, said
    assert judge_history(run) == []
    replay(run, [Step("berase", ("v4",))])
    assert run.buyer.cli("admit", d91).exit_code == 0 and m.admit("d91", run.buyer.size())


def test_a_pin_to_a_suite_signed_before_the_buyers_marking(tmp_path: Path) -> None:
    """hist32 finding 2 (history 2168, minimised): the buyer marks the vendor's key
    compromised since now, a successor in which ``vendor`` holds no role, then pins its
    ``suite@1`` to the vendor's suite imported before: `release` and every verifier judge
    that record under the policy it was signed under, and accept it, but ``policy set``
    judged it under the new policy alone and refused the pin (``its dataset record (log index
    3) does not verify``). A marking since before the suite's import, with the pin in force,
    is recorded, the pin kept (history 2062: the next test). Every step and path agrees with
    the model."""
    steps = [Step("vrecord", ("v0", 0, "orig", False)),
             Step("vdataset", ("vsuite", ("v0",), "holdout")), Step("ship", ("vsuite",)),
             Step("bmark", (None,)), Step("bpin")]
    run = run_history(tmp_path / "h", steps)
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    assert run.model.pinned and judge_history(run) == []


def test_a_marking_is_not_held_back_by_a_pin_it_makes_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """History 2062 (hist32, minimised), decided by the lead: with ``suite@1`` pinned to the
    vendor's suite, the buyer marks the vendor's key compromised since that suite's import.
    ``policy set`` refused the marking (the pinned suite's record would not verify under it),
    so a declaration of compromise waited on a pin; now it is recorded with a warning naming
    the pin, which is kept, and no release on that suite passes (``r2``) until another is
    pinned. Every step and path agrees with the model. ``policy set`` judges the pins once
    (it judged them twice, once to show the warning and once to record: the lead, eighteenth
    round)."""
    steps = [Step("vrecord", ("v0", 0, "orig", False)), Step("vrecord", ("v1", 1, "orig", False)),
             Step("vdataset", ("vsuite", ("v0",), "holdout")),
             Step("ship", ("vsuite",)), Step("ship", ("v1",)),
             Step("bdataset", ("d1", ("v1",), "train")), Step("bapprove", ("d1",)),
             Step("btrain", ("c1", "d1", None)),
             Step("beval", ("e1", "c1", "vsuite", "evaluator")),
             Step("bpin"), Step("brelease", ("r1", "c1")), Step("bmark", ("vsuite",))]
    run = run_history(tmp_path / "h", steps)
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    assert run.model.pinned and run.model.marked is not None
    replay(run, [Step("brelease", ("r2", "c1"))])
    assert " -> refused: " in run.ran[-1], run.ran
    assert not run.problems and judge_history(run) == []
    judged: list[str] = []

    def counted(ledger: Any, policy: Any) -> list[str]:
        judged.append(policy.name)
        return pins_it_breaks(ledger, policy)

    monkeypatch.setattr(status, "pins_it_breaks", counted)
    r = succeed(run, run.marking, run.model.rules, True)  # a later successor keeps the pin too
    assert r.exit_code == 0, r.stderr
    assert len(judged) == 1, judged
    assert re.search(r"WARNING: policy '[^']+': release: \S+ on suite@1: the suite is pinned to "
                     r"sha256:\w+…?: .*: the pin is kept; no release on that suite passes until "
                     "another is pinned", r.stderr), r.stderr
    # ``--json`` carries the kept pin's line too (left34: stderr only before).
    r = succeed(run, run.marking, run.model.rules, True, as_json=True)
    assert r.exit_code == 0, r.stderr
    [line] = json.loads(r.stdout)["keptPins"]
    assert f"WARNING: {line}\n" in r.stderr and line.endswith("until another is pinned"), line


def test_a_release_is_refused_for_a_real_drop_only(tmp_path: Path) -> None:
    """R16, R19 (hist30 finding 1, history 1297 minimised), R24 (hist33): the judge scores
    ``c1`` 0.9, ``c2`` 0.7 and ``c7`` 0.5 (`score_of`: their bytes, and a salt found for these
    scores, `salt_for`), both children of ``c1``.
    Released without ``max_drop`` (``r1``, ``r7``: no parent's evaluation cited), then under
    the buyer's successors: ``max_drop = 0.2`` fails both (the rules in force judge every
    release: SECURITY.md twelfth round) and a release of ``c2``, 0.2 below its parent, is done
    (``r2``, citing ``e1``; it was refused, "score 0.7 dropped 0.2 from the parent's 0.9, more
    than 0.2": the binary floats' difference), one of ``c7``, 0.4 below, refused;
    ``max_drop = 0.1`` fails ``r2`` too; ``min = 0.7`` on the score alone holds ``r1`` and
    ``r2`` again (0.7 is the minimum) and fails ``r7``. Every step and path, the offline
    verifier's among them, agrees with the model."""
    steps = [Step("vrecord", ("v1", 0)), Step("vrecord", ("v2", 0)), Step("ship", ("v1",)),
             Step("ship", ("v2",)), Step("bdataset", ("suite", ("v2",), "holdout")),
             Step("bdataset", ("d1", ("v1",), "train")), Step("bapprove", ("d1",)),
             Step("btrain", ("c1", "d1", None)), Step("btrain", ("c2", "d1", "c1")),
             Step("btrain", ("c7", "d1", "c1")), Step("beval", ("e1", "c1")),
             Step("beval", ("e2", "c2")), Step("beval", ("e3", "c7")),
             Step("brelease", ("r1", "c2")), Step("brelease", ("r7", "c7")),
             Step("brules", (1,)), Step("brelease", ("r2", "c2")),
             Step("brelease", ("r8", "c7"))]
    trained = run_history(tmp_path / "t", steps[:10])  # (the checkpoints: a salt for the scores)
    keys = [checkpoint_files(trained.buyer, trained.model.buyer[c].digest)
            for c in ("c1", "c2", "c7")]
    run = run_history(tmp_path / "h", steps, salt_for(keys, [9, 7, 5]))
    m = run.model
    assert [m.buyer[c].score for c in ("c1", "c2", "c7")] == [9, 7, 5]
    assert run.ran[-2] == "brelease(r2, c2) -> ok", run.ran
    assert re.match(r"brelease\(r8, c7\) -> refused: score 0.5 dropped 0.4 from the parent's "
                    r"0.9, more than 0.2 \(evaluation", run.ran[-1]), run.ran

    def verdicts() -> list[bool]:  # verify RELEASE; judge_history: every path, at the end
        got = [run.buyer.cli("verify", m.buyer[r].digest).exit_code == 0
               for r in ("r1", "r7", "r2")]
        assert got == [m.release_ok(r) for r in ("r1", "r7", "r2")], run.ran
        return got

    assert verdicts() == [False, False, True]
    replay(run, [Step("brules", (2,))])
    assert verdicts() == [False, False, False]
    replay(run, [Step("brules", (4,)), Step("brelease", ("r3", "c1"))])
    assert run.ran[-1] == "brelease(r3, c1) -> ok", run.ran
    assert verdicts() == [True, False, True]
    assert not run.problems and judge_history(run) == []


def test_the_vendors_own_contamination_settings(tmp_path: Path) -> None:
    """R25 (hist33): the vendor holds ``v1`` out (``wh``) and its ``dataset create`` refuses as its
    own policy's ``[contamination]`` says: a train set of a copy of ``v1`` cut (``v2``, a run
    of 21 steps) refused under the default (``w1``), made under ``runs = "near"`` (``w2``), as
    is one of a near copy (``v3``: ``w4``), refused under ``refuse = "near"`` (``w3``). The
    buyer, holding nothing out, trains on ``w2``; once it imports ``wh`` (after the vendor's
    policy refusing near copies: an import logs none of the vendor's policies, its artifacts
    and their import records only) its own rules alone bind it: ``w2`` refused (a run, the
    default), ``w4`` trained on (a near copy is information), ``w2`` again under its own ``runs
    = "near"``. Every step, and ``admit`` of each, agrees with the model (the other paths:
    the random histories')."""
    steps = [Step("vrecord", ("v1", 0, "orig", False)), Step("vrecord", ("v2", 1, "cut", False)),
             Step("vrecord", ("v3", 1, "n1", False)),
             Step("vdataset", ("wh", ("v1",), "holdout")),
             Step("vdataset", ("w1", ("v2",), "train")), Step("vcontam", (3,)),
             Step("vdataset", ("w2", ("v2",), "train")),
             Step("vdataset", ("w4", ("v3",), "train")), Step("vcontam", (1,)),
             Step("vdataset", ("w3", ("v3",), "train")), Step("ship", ("w2",)),
             Step("ship", ("w4",)), Step("bapprove", ("w2",)), Step("bapprove", ("w4",)),
             Step("btrain", ("c1", "w2", None)), Step("ship", ("wh",)),
             Step("btrain", ("c2", "w2", None)), Step("btrain", ("c3", "w4", None)),
             Step("bcontam", (3,)), Step("btrain", ("c4", "w2", None))]
    run = run_history(tmp_path / "h", steps)
    refused = [r.split(" -> ")[0] for r in run.ran if " -> refused" in r]
    assert refused == ["vdataset(w1, ('v2',), train)", "vdataset(w3, ('v3',), train)",
                       "btrain(c2, w2, None)"], run.ran
    m, now = run.model, run.buyer.size()
    assert [run.buyer.cli("admit", m.buyer[w].digest).exit_code == 0 for w in ("w2", "w4")] == [
        m.admit(w, now) for w in ("w2", "w4")] == [True, True]
    assert not run.problems


def test_an_erasure_ends_no_comparison_with_a_sealed_held_out_batch(tmp_path: Path) -> None:
    """R22 (hist33, hist32's Left): the buyer holds out the vendor's sealed ``v1``; an exact copy
    (``v2``) is refused by ``dataset create`` from ``v1``'s record. The vendor erases ``v1``
    (taken in): ``dataset create`` then skips it (an erased batch has no features, not even
    published ones: ledger/contamination.py) and records ``d2``, but the gate compares a sealed
    batch by the fingerprints its verified record publishes, which outlive the erasure of its
    blobs (SECURITY.md agree24 finding 1): ``train`` on ``d2`` is refused, and still after the
    buyer's approver's own erasure. Every step and path agrees with the model."""
    steps = [Step("vrecord", ("v1", 0, "orig", True)), Step("vrecord", ("v2", 1, "orig", False)),
             *(Step("ship", (x,)) for x in ("v1", "v2")),
             Step("bdataset", ("h1", ("v1",), "holdout")),
             Step("bdataset", ("d2", ("v2",), "train")), Step("verase", ("v1",)),
             Step("update"), Step("bdataset", ("d2", ("v2",), "train")),
             Step("bapprove", ("d2",)), Step("btrain", ("c1", "d2", None)),
             Step("berase", ("v1",)), Step("btrain", ("c2", "d2", None))]
    run = run_history(tmp_path / "h", steps)
    refused = [r.split(" -> ")[0] for r in run.ran if " -> refused" in r]
    assert refused == ["bdataset(d2, ('v2',), train)", "btrain(c1, d2, None)",
                       "btrain(c2, d2, None)"], run.ran
    r = run.buyer.cli("admit", run.model.buyer["d2"].digest)
    assert r.exit_code == 1 and re.search(r"exact duplicate: ", r.stderr), r.output
    assert judge_history(run) == []


def test_an_approvers_erasure_stands_when_the_producers_stops_counting(tmp_path: Path) -> None:
    """hist33 finding 1 (history 7137, minimised): the vendor erases ``v1``; the erasure reaches
    the buyer with the ship of ``v3`` (its files deleted there), and the buyer's approver
    erases ``v1`` too (recorded to end the gate's comparison, the producer's erasure having
    deleted everything). Then the buyer marks the vendor's key compromised since ``v3``'s
    import: the vendor's erasure counts for nothing, and ``verify v1`` failed, ``blob sha256:…
    is missing``, ``impact`` too, although the buyer's approvers erased it (R13): their
    erasure listed no blob, so nothing that counts explained the missing ones. It now lists
    the blobs the producer's erasure deleted, and stands alone: both accept ``v1``, erased, as
    the model does (`judge_history`'s other paths: the random histories')."""
    steps = [Step("vrecord", ("v1", 0, "orig", False)), Step("ship", ("v1",)),
             Step("verase", ("v1",)), Step("vrecord", ("v3", 0, "orig", False)),
             Step("ship", ("v3",)), Step("berase", ("v1",)), Step("bmark", ("v3",))]
    run = run_history(tmp_path / "h", steps)
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    v1 = run.model.buyer["v1"].digest
    assert run.model.batch_ok("v1") and not run.problems
    assert cli_verdict(run.buyer, "verify", v1) == (True, "")
    assert impact_verdict(run.buyer, v1, v1)[0], impact_verdict(run.buyer, v1, v1)


def test_the_vendors_gate(tmp_path: Path) -> None:
    """R26 (hist34): the vendor trains on its own data (``vtrain``) under its own policy, and
    its gate refuses as the model says: ``w2`` (a cut copy of its held-out ``v1``) unapproved
    (``vc1``), then trained on under ``runs = "near"`` (``vc2``), refused once its rules are
    the default again (``vc3``: a shared run); ``w4`` once its batch is revoked (``vc4``);
    ``w3`` trained on (``vc5``), then refused once the vendor declares its key compromised
    since ``w3``'s record (``vc6``), and ``vc5`` then fails ``verify`` there, while ``w4`` is
    admitted again (``v4``'s revocation, signed since, counts for nothing: R15). ``admit`` of
    each vendor dataset and ``verify`` of each vendor checkpoint agree with the model."""
    steps = [Step("vrecord", ("v1", 0, "orig", False)), Step("vrecord", ("v2", 1, "cut", False)),
             Step("vrecord", ("v3", 0, "orig", False)), Step("vrecord", ("v4", 0, "orig", False)),
             Step("vdataset", ("wh", ("v1",), "holdout")), Step("vcontam", (3,)),
             *(Step("vdataset", (w, (b,), "train")) for w, b in (("w2", "v2"), ("w4", "v4"),
                                                                   ("w3", "v3"))),
             Step("vtrain", ("vc1", "w2")), Step("vapprove", ("w2",)),
             Step("vtrain", ("vc2", "w2")), Step("vcontam", (0,)), Step("vtrain", ("vc3", "w2")),
             Step("vapprove", ("w4",)), Step("vrevoke", ("v4",)), Step("vtrain", ("vc4", "w4")),
             Step("vapprove", ("w3",)), Step("vtrain", ("vc5", "w3")),
             Step("vcompromise", ("w3",)), Step("vtrain", ("vc6", "w3"))]
    run = run_history(tmp_path / "h", steps)
    refused = [r.split("(")[1].split(",")[0] for r in run.ran if " -> refused" in r]
    assert refused == ["vc1", "vc3", "vc4", "vc6"], run.ran
    m = run.model
    got = [run.vendor.cli("admit", m.vendor[w].digest).exit_code == 0 for w in
           ("wh", "w2", "w3", "w4")] + [run.vendor.cli("verify", m.vchecks[c].digest).exit_code
                                        == 0 for c in ("vc2", "vc5")]
    assert got == [m.v_admit(w) for w in ("wh", "w2", "w3", "w4")] + [
        m.v_checkpoint_ok(c) for c in ("vc2", "vc5")] == [False] * 3 + [True, True, False], run.ran
    assert not run.problems


def test_a_holdout_the_buyers_marking_distrusts(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """R11 with R20 (hist34 finding 1; the lead's decision, hold35: fail closed): the buyer
    trains ``c0`` on the vendor's ``v1`` (``d1``), then makes ``d2`` of an exact copy of it
    (``v2``); the vendor then holds ``v1`` out (``wh``), shipped: ``c1`` and ``c2`` are refused.
    Once the buyer marks the vendor's key compromised since that import, ``wh``'s record counts
    for nothing here, and still holds ``v1`` out: ``c3``, ``c4`` and ``dataset create`` of a
    new train set of ``v1`` (``d3``) are refused, and ``admit`` names the record, why it is not
    trusted and the way on. ``c0``, trained before the holdout, still verifies; ``c5``, trained
    under hist34's rule (the distrusted holdout taken for none, as the gate did before),
    fails ``verify`` and both verifiers of its bundle with the same line: the gate and the
    verifiers decide alike. The way on: the approver erases ``v1``, which ends the comparison
    of ``d2`` with it (``c6``). Every path agrees with the model (`judge_history`)."""
    steps = [Step("vrecord", ("v1", 0, "orig", False)), Step("vrecord", ("v2", 1, "orig", False)),
             Step("ship", ("v1",)), Step("ship", ("v2",)),
             *(Step("bdataset", (f"d{i}", (f"v{i}",), "train")) for i in (1, 2)),
             Step("bapprove", ("d1",)), Step("bapprove", ("d2",)),
             Step("btrain", ("c0", "d1", None)),
             Step("vdataset", ("wh", ("v1",), "holdout")), Step("ship", ("wh",)),
             Step("btrain", ("c1", "d1", None)), Step("btrain", ("c2", "d2", None)),
             Step("bmark", ("wh",)), Step("btrain", ("c3", "d1", None)),
             Step("btrain", ("c4", "d2", None)), Step("bdataset", ("d3", ("v1",), "train"))]
    run = run_history(tmp_path / "h", steps)
    refused = [r.split("(")[1].split(",")[0] for r in run.ran if " -> refused" in r]
    assert refused == ["c1", "c2", "c3", "c4", "d3"], run.ran
    m, b = run.model, run.buyer
    with monkeypatch.context() as old:  # hist34's rule: the gate let such a train set through
        import trajledger.verify.distrusted as distrusted
        from trajledger.verify.lineage import LineageVerifier

        old.setattr(LineageVerifier, "distrusted", lambda *_: None)
        old.setattr(distrusted, "distrusted_holdout", lambda *_: None)
        assert perform(run, Step("btrain", ("c5", "d1", None)), b.size())[0]
    held = "rollout-batch {} is in holdout dataset wh@1 (log index {}), whose record the policy " \
        "does not trust (".format(m.buyer["v1"].digest[:19] + "…", m.buyer["wh"].index)
    for c, ok in (("c0", True), ("c5", False)):
        assert m.checkpoint_ok(c) is ok
        got = {"verify": cli_verdict(b, "verify", m.buyer[c].digest),
               **bundle_verdicts(run, b, m.buyer[c].digest, "buyer")}
        assert {k: v[0] for k, v in got.items()} == dict.fromkeys(got, ok), got
    said = " ".join(b.cli("verify", m.buyer["c5"].digest).output.split())
    assert held in said and "compromised since" in said and "held out all the same (fail " \
        "closed" in said and "train on a dataset without this batch" in said, said
    admit1 = " ".join(b.cli("admit", m.buyer["d1"].digest).output.split())
    assert held in admit1, admit1
    admit2 = " ".join(b.cli("admit", m.buyer["d2"].digest).output.split())
    assert "exact duplicate" in admit2 and "holdout dataset wh@1 (log index" in admit2 and (
        "compromised since") in admit2 and "taken as a holdout all the same (fail closed" in \
        admit2 and "an approver's erasure of the held-out batch" in admit2, admit2
    replay(run, [Step("berase", ("v1",)), Step("btrain", ("c6", "d2", None))])
    assert run.ran[-1] == "btrain(c6, d2, None) -> ok", run.ran
    assert judge_history(run) == []


def test_a_vendor_that_names_the_buyers_approver(tmp_path: Path) -> None:
    """R30 (hist36): the buyer's approver revokes the vendor's ``v1`` and a sale brings the
    revocation into the vendor's log, ignored there (its policy names no approver of the
    buyer's); the vendor's approver then names the buyer's approver in its policy (``vname``),
    and the next sale brings the buyer's erasure of ``v2`` and revocation of ``d1`` (a set the
    vendor bought back): logged under a policy naming their signer, they count there (schemas/
    SPEC.md "Revocation authority": an approver revokes or erases anything), so the vendor's
    gate refuses ``w2`` (of ``v2``, erased, its files deleted at the vendor) and ``d1``; ``v1``'s
    revocation, logged before the naming, still counts for nothing there (each record is judged
    under the policy in force at its index): ``w1`` is admitted. Every path agrees with the
    model (`judge_history`: the vendor's gate, its store, its newest bundles)."""
    steps = [*(Step("vrecord", (f"v{i}", 0, "orig", False)) for i in (1, 2, 3)),
             *(Step("ship", (f"v{i}",)) for i in (1, 2, 3)),
             *(Step("vdataset", (f"w{i}", (f"v{i}",), "train")) for i in (1, 2)),
             Step("vapprove", ("w1",)), Step("vapprove", ("w2",)),
             Step("bdataset", ("d1", ("v3",), "train")), Step("vtrust"), Step("bsell", ("d1",)),
             Step("vapprove", ("d1",)), Step("brevoke", ("v1",)), Step("bown", ("b91",)),
             Step("bdataset", ("d91", ("b91",), "train")), Step("bsell", ("d91",)),
             Step("vname"), Step("berase", ("v2",)), Step("brevoke", ("d1",)),
             Step("bdataset", ("d92", ("b91",), "train")), Step("bsell", ("d92",))]
    run = run_history(tmp_path / "h", steps)
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    m, v = run.model, run.vendor
    assert (m.vrev_b, m.verase_b, m.vtook) == ({"d1"}, {"v2"}, {"v1"})
    got = {w: v.cli("admit", m.v_art(w).digest).exit_code == 0 for w in ("w1", "w2", "d1")}
    assert got == {w: m.v_admit(w) for w in got} == {"w1": True, "w2": False, "d1": False}, got
    assert files_of(v, m.vendor["v2"].digest) == set()
    assert judge_history(run) == []


def test_the_vendor_buys_back(tmp_path: Path) -> None:
    """R27, R28 (hist35): the buyer sells its train sets back to the vendor (``bsell``). Refused
    until the vendor's policy names the buyer's producer key and log (``vtrust``); then the
    vendor's batches in them stay its own and its gate judges them under its own policy: ``d1``
    of its held-out ``v1`` refused (``vb2``), ``d2`` of an exact copy of it too (``vb3``),
    ``d91`` of the buyer's own batch refused unapproved (``vb1``: the buyer's approvals never
    travel with a dataset), then trained on; ``d82``, chat episodes two words off the vendor's
    held-out ones (a near duplicate, R28), trained on under the default rules and refused under
    ``refuse = "near"``; the vendor's holdout of ``v3`` is refused, a train set it bought holding
    it. The buyer's approver revokes ``d91`` and erases ``v3``, taken in with the next sale and
    ignored there (the vendor's policy does not name that approver): ``v3``'s files stay and
    ``d3`` is trained on until the vendor revokes ``v3`` itself; its revocation of ``v1``, in the
    sold set's lineage, is carried by the vendor's bundle of ``v1``, which the buyer's policy
    refuses (history 9030). Once the vendor declares its
    key ``vendor`` compromised, a bundle holding a record that key signed is refused (``d2``),
    while what the buyer's key signed is trained on still (``vb8``). ``admit`` of each set bought
    back and ``verify`` of each vendor checkpoint agree with the model."""
    steps = [Step("vrecord", ("v1", 0, "orig", False)), Step("vrecord", ("v2", 1, "orig", False)),
             Step("vrecord", ("v3", 0, "orig", False)),
             Step("vrecord", ("v81", 0, "t-orig", False)),
             Step("vrecord", ("v82", 81, "t-edit", False)),
             *(Step("ship", (x,)) for x in ("v1", "v2", "v3", "v81", "v82")),
             Step("bown", ("b91",)), Step("vdataset", ("wt", ("v81",), "holdout")),
             *(Step("bdataset", (f"d{i}", (f"v{i}",), "train")) for i in (1, 2, 3)),
             Step("bdataset", ("d91", ("b91",), "train")),
             Step("bdataset", ("d82", ("v82",), "train")),
             Step("bsell", ("d1",)), Step("vtrust"), Step("vdataset", ("wh", ("v1",), "holdout")),
             *(Step("bsell", (d,)) for d in ("d1", "d2", "d3", "d91", "d82")),
             Step("vdataset", ("wh3", ("v3",), "holdout")), Step("vtrain", ("vb1", "d91")),
             *(Step("vapprove", (d,)) for d in ("d91", "d1", "d2", "d3", "d82")),
             *(Step("vtrain", (f"vb{i}", d)) for i, d in ((2, "d1"), (3, "d2"), (4, "d3"),
                                                          (5, "d91"), (9, "d82"))),
             Step("vcontam", (1,)), Step("vtrain", ("vb10", "d82")),
             Step("brevoke", ("d91",)), Step("berase", ("v3",)), Step("brevoke", ("v1",)),
             Step("bsell", ("d1",)),
             Step("vtrain", ("vb11", "d3")), Step("vrevoke", ("v3",)),
             Step("vtrain", ("vb6", "d3")), Step("vcompromise", (None,)),
             Step("bsell", ("d2",)), Step("vtrain", ("vb8", "d91"))]
    run = run_history(tmp_path / "h", steps)
    refused = [r.split(" -> ")[0] for r in run.ran if " -> refused" in r]
    assert refused == ["bsell(d1)", "vdataset(wh3, ('v3',), holdout)", "vtrain(vb1, d91)",
                       "vtrain(vb2, d1)", "vtrain(vb3, d2)", "vtrain(vb10, d82)",
                       "vtrain(vb6, d3)", "bsell(d2)"], run.ran
    m, v = run.model, run.vendor
    assert files_of(v, m.vendor["v3"].digest), "the buyer's erasure deleted the vendor's files"
    # The buyer's revocation of v1, ignored at the vendor, travels in its bundles (history 9030).
    assert [o[0] for o in bundle_verdicts(run, v, m.vendor["v1"].digest, "v1").values()] == [
        m.v_bundle_ok("v1")] * 2 == [False] * 2, run.ran
    got = [v.cli("admit", m.back[d].digest).exit_code == 0 for d in ("d1", "d2", "d3", "d91",
                                                                     "d82")]
    got += [v.cli("verify", m.vchecks[c].digest).exit_code == 0 for c in ("vb4", "vb9", "vb8")]
    assert got == [m.v_admit(d) for d in ("d1", "d2", "d3", "d91", "d82")] + [
        m.v_checkpoint_ok(c) for c in ("vb4", "vb9", "vb8")] == [False] * 3 + [True, False] + [
        False, True, True], run.ran
    assert not run.problems


def test_a_vendor_checkpoint_fine_tuned_then_its_approval_withdrawn(tmp_path: Path) -> None:
    """R31 (hist37): the vendor trains ``vc1`` on ``w1`` under its approver's approval; its
    bundle is refused by the buyer until the buyer's policy names the vendor's trainer
    (``bvtrust``), then imported with the approval it was trained under (the vendor's approver
    is an approver here too: R14), and the buyer fine-tunes ``c71`` from it on its own ``d1``.
    hist37 finding 2 (history 733 minimised; its own test until hist42): after the size the
    buyer applied (``v2``'s ship) the vendor records ``w9``, a train set of ``v2``, and ``w8``,
    a holdout of ``v3`` (neither holds ``vc1``'s batch), before it trains ``vc1``; its bundle
    (``--updates-since`` the size applied) carries those dataset records as entries of the
    extension: the held-out check reads every dataset record before the use, so their
    envelopes travel too (not before: ``not held out: dataset record 6 cannot be read``, the
    bundle refused by the buyer and under the vendor's own policy alike).
    The vendor's approver withdraws that approval and the buyer's ``monitor`` takes the
    withdrawal in, as an update bundle of the same extension does (R18): ``vc1`` and ``c71``
    fail at the buyer, and ``admit w1`` refuses (hist37 finding 1: the monitor dropped every
    entry not about an artifact held here, a withdrawal's subject being the approval's
    envelope, and moved the size applied past it). The vendor then revokes ``v1``: ``monitor
    --fail-on-revocation`` exits 1, naming ``c71``. Every path agrees with the model."""
    steps = [*(Step("vrecord", (f"v{i}", 0, "orig", False)) for i in (1, 2, 3)),
             Step("ship", ("v2",)), Step("vdataset", ("w1", ("v1",), "train")),
             Step("vapprove", ("w1",)), Step("vdataset", ("w9", ("v2",), "train")),
             Step("vdataset", ("w8", ("v3",), "holdout")), Step("vtrain", ("vc1", "w1")),
             Step("bdataset", ("d1", ("v2",), "train")), Step("bapprove", ("d1",)),
             Step("vckship", ("vc1",)), Step("bvtrust"), Step("vckship", ("vc1",)),
             Step("btrain", ("c71", "d1", "vc1"))]
    run = run_history(tmp_path / "h", steps)
    assert [r.split(" -> ")[1][:7] for r in run.ran] == ["ok"] * 11 + ["refused"] + ["ok"] * 3
    m, b = run.model, run.buyer
    # (hist42: what the withdrawal and the revocation change; every artifact at the end)
    assert m.checkpoint_ok("c71") and judge_history(run, {"vc1", "c71", "w1", "v1"}) == []
    replay(run, [Step("vwithdraw", ("w1",)), Step("monitor")])
    assert not m.checkpoint_ok("vc1") and not m.checkpoint_ok("c71") and not m.admit("w1", 0)
    assert b.cli("verify", m.buyer["vc1"].digest).exit_code == 1
    replay(run, [Step("vrevoke", ("v1",)), Step("bwatch")])
    assert run.ran[-1].startswith("bwatch() -> refused: something this ledger holds"), run.ran
    assert judge_history(run) == []


def test_a_vendor_revocation_not_applied_after_the_marking(tmp_path: Path) -> None:
    """R31 with R20 (out36's warning): after the buyer's marking the vendor revokes ``v1``,
    under the buyer's ``c1``, and erases ``v2``; ``monitor --fail-on-revocation`` exits 1,
    each ignored under the marking and said so (`unapplied`: ``WARNING: not applied here``,
    the checkpoint built on it named), and ``c1`` still holds (R20)."""
    steps = [*(Step("vrecord", (f"v{i}", 0, "orig", False)) for i in (1, 2)),
             Step("ship", ("v1",)), Step("ship", ("v2",)),
             Step("bdataset", ("d1", ("v1",), "train")), Step("bapprove", ("d1",)),
             Step("btrain", ("c1", "d1", None)), Step("bmark", (None,)),
             Step("vrevoke", ("v1",)), Step("verase", ("v2",)), Step("bwatch")]
    run = run_history(tmp_path / "h", steps)
    assert run.ran[-1].startswith("bwatch() -> refused: something this ledger holds"), run.ran
    assert run.model.checkpoint_ok("c1") and run.model.watched() is True
    r = watch(run.vendor, run.buyer, "--fail-on-revocation")  # nothing new: exit 0
    assert r.exit_code == 0 and judge_history(run) == []
    unapplied(run, r, {"v1"}, run.buyer.size())  # `unapplied` sees a line missing
    assert run.problems and "not applied here" in run.problems[-1]


def test_a_vendor_checkpoint_shipped_whose_lineage_fails(tmp_path: Path) -> None:
    """R31's "either" cases of `Model.carried` decided (hist38, hist37's Left): the import
    refuses a checkpoint's bundle that fails for anything but a revocation, so one whose
    dataset's approval the vendor's approver withdrew since is refused (``approvals: 0 of 1``);
    one whose dataset the vendor revoked is taken in as revoked, and so is one whose batch the
    buyer holds out (the import judges the bundle, not this ledger): done, and it fails here."""
    steps = [*(Step("vrecord", (f"v{i}", 0, "orig", False)) for i in (1, 2)),
             Step("vdataset", ("w1", ("v1",), "train")), Step("vapprove", ("w1",)),
             Step("vtrain", ("vc1", "w1")), Step("ship", ("v2",)), Step("bvtrust")]
    run = run_history(tmp_path / "a", steps)
    other = fork(run, tmp_path / "b")  # (hist42: the prefix run once)
    replay(run, [Step("vwithdraw", ("w1",)), Step("vckship", ("vc1",))])
    assert run.ran[-1].startswith("vckship(vc1) -> refused: approvals: 0 of 1"), run.ran
    assert run.model.carried("vc1") is False and judge_history(run) == []
    run = other
    replay(run, [Step("ship", ("v1",)), Step("bdataset", ("h1", ("v1",), "holdout")),
                 Step("vrevoke", ("w1",)), Step("vckship", ("vc1",))])
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    assert not run.model.checkpoint_ok("vc1") and judge_history(run) == []


def test_a_lab_relays_the_vendors_batch_after_its_log_was_applied(tmp_path: Path) -> None:
    """R36 (hist40; gap39 finding 1 in the model): the lab buys the vendor's ``v2`` and trains
    ``lc1`` on it; the vendor revokes ``v2``; the buyer, holding ``v1`` only, applies the
    vendor's log past that revocation (passed over); the lab's bundle of ``lc1`` then brings
    ``v2``: the import says the vendor's log is unread (`relay` checks it, and that an update
    since the size applied is refused), ``lc1`` still verifies (not known revoked here), and
    ``monitor --fail-on-revocation`` reads the log from its first entry: exit 1, ``lc1``
    fails from then on. With hist39's Left (R34, its by-name line): the buyer recorded ``v1``
    itself before the vendor's record came, and the vendor erased ``v1``: ``verify v1`` (the
    buyer's own record) names the erasure that deleted its files, which does not count for it
    (missing, not erased: hist39 finding 1)."""
    steps = [*(Step("vrecord", (f"v{i}", 0, "orig", False)) for i in (1, 2)),
             Step("bsame", ("v1",)), Step("ship", ("v1",)), Step("lbuy", ("v2",)),
             Step("vrevoke", ("v2",)), Step("verase", ("v1",)), Step("update"), Step("blab"),
             Step("lrelay")]
    run = run_history(tmp_path / "h", steps)
    assert all(r.endswith("-> ok") for r in run.ran) and run.problems == [], run.ran
    m = run.model
    assert m.unread and m.checkpoint_ok("lc1") and m.watched() is False
    r = run.buyer.cli("verify", m.buyer["lc1"].digest)
    assert r.exit_code == 0 and UNREAD in r.stderr, r.output
    replay(run, [Step("bwatch")])
    assert run.ran[-1].startswith("bwatch() -> refused: something this ledger holds"), run.ran
    assert not m.unread and not m.checkpoint_ok("lc1") and judge_history(run) == []
    r = run.buyer.cli("verify", "v1")
    assert r.exit_code == 1 and not m.batch_ok("v1", named=True), r.output
    assert re.search(r"is missing: deleted by the erasure at log index \d+, which does not "
                     r"count for this record\n", r.stderr), r.stderr


def test_a_relay_after_the_vendors_log_key_rotation_says_why_it_is_read_again(
        tmp_path: Path) -> None:
    """R36 with R35 (hist40 finding 5; seed 1625): the buyer applied the vendor's log up to
    size 4, the vendor rotated its log key, and the lab's bundle brought ``v2``: an update
    since 4 is refused, rightly, but its line says the bundle "does not carry the log since
    size 0, what you applied of it", where the buyer applied 4 and the log waits to be read
    again for ``v2`` (without the rotation: ``where it must be read from again: records other
    logs brought you after you applied it up to size 4 …``). With R35 (hist41; seed 1392,
    rot40 finding 1): the vendor's revocation of ``v1`` taken in before the rotation,
    ``monitor --fail-on-revocation`` after it exits 0 (on 2af7bb98: 1, the revocation again)."""
    steps = [*(Step("vrecord", (f"v{i}", 0, "orig", False)) for i in (1, 2)),
             Step("ship", ("v1",)), Step("vrevoke", ("v1",)), Step("update"), Step("vrotate"),
             Step("bwatch"), Step("lbuy", ("v2",)), Step("blab"), Step("lrelay")]
    run = run_history(tmp_path / "h", steps)
    assert all(r.endswith("-> ok") for r in run.ran) and run.model.unread, run.ran
    assert run.problems == [], run.problems
    late = tmp_path / "late.tar.zst"
    run.vendor.run("export", "--updates-since", str(run.model.applied), "--out", late)
    r = run.buyer.cli("import", late, "--key", "approver")
    assert r.exit_code == 1 and "where it must be read from again: records other logs brought " \
        f"you after you applied it up to size {run.model.applied}" in r.stderr, r.stderr


def test_a_key_compromise_after_a_relay_of_a_batch_held_from_the_vendor_is_a_warning(
        tmp_path: Path) -> None:
    """R15 with R36 (hist41 finding 2): the buyer holds ``v1`` from the vendor's ship, the lab
    relays it (its bundle of ``lc1``), then the vendor declares ``vendor`` compromised since
    ``v1``. The update that takes the declaration in revokes nothing (a log stops only what it
    alone brought: by design, rev4 finding 1; R15 in the model), but says so in a ``NOTE``
    only, without the way on, where the relay's import after the declaration says
    ``WARNING: key …, which vendor… declares compromised …, signed what was just taken in
    from lab…: …; not revoked here …: if the key is theirs, record a successor with
    [[revoked_keys]] …`` (and, without the relay, the update revokes ``v1``): the same facts,
    read in the other order, and ``v1`` is the vendor's own record, brought by its log."""
    steps = [Step("vrecord", ("v1", 0, "orig", False)), Step("ship", ("v1",)),
             Step("lbuy", ("v1",)), Step("blab"), Step("lrelay"), Step("vcompromise", ("v1",))]
    run = run_history(tmp_path / "h", steps)
    assert all(r.endswith("-> ok") for r in run.ran) and run.problems == [], run.ran
    out = tmp_path / "update.tar.zst"
    run.vendor.run("export", "--updates-since", str(run.model.since), "--out", out)  # (0: marked)
    r = run.buyer.cli("import", out, "--key", "approver")
    assert r.exit_code == 0 and "NOTE: ignored: key compromise" in r.stderr, r.stderr
    assert re.search(r"WARNING: .*rollout-batch v1 .*\[\[revoked_keys\]\]", r.stderr), r.stderr
