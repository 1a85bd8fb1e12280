"""trajledger's verifier: the formats and checks a third party needs, and nothing else.

Layer map (imports run one way: runner -> ledger -> verify):

- ``errors``     the exception hierarchy (imports nothing; import it from there, the package
                 itself exports nothing)
- ``digest``     ``sha256:<hex>`` digests, parallel streaming file hashing
- ``keys``       public keys (Ed25519, ECDSA P-256) and keyids
- ``dsse``       DSSE envelopes and PAE
- ``statement``  in-toto Statement v1
- ``manifest``   artifact manifests (names and sizes bound)
- ``predicates`` every predicate type URI
- ``merkle``     RFC 6962 hashing, inclusion and consistency proofs
- ``tiles``      C2SP tlog-tiles layout and a storage-independent tile reader
- ``note``       C2SP signed notes; ``checkpoint`` C2SP checkpoints; ``tlog_proof`` offline proofs
- ``log_entry``  the log's entries (JCS records with the ``prev`` hash chain); ``entry_format``
                 their version and kinds, ``entry_fields`` each field checked (a writer's
                 checks, and why bytes are not canonical: loaded only then)
- ``logcheck``   the chain-and-root checker of a tiled log (or a subset of it) over a fetcher
- ``policy``     trust policies and their history
- ``sigstore_adapter``  Sigstore bundles: key mode with ``cryptography``; keyless through the
                 ``sigstore`` package, imported lazily here only (else "not verifiable here")
- ``model_signing``  OpenSSF model_signing's signed statement and a model directory against it
- ``evidence``   the read-only `Evidence` protocol; ``ledger_dir`` it over a ledger directory
                 (``bundle`` over an exported bundle)
- ``nodes``      the checks, nodes and edges every check writes (pure data)
- ``report``     the verified graph over them, its verdict and text form;
                 ``report_json`` its JSON form (loaded only when asked for)
- ``judge``      pure judgement: a record from its envelope's bytes, approvals, held-out
                 batches, evaluations, releases (no I/O, no threads)
- ``trusted_log`` the checkpoint and the entries it proves included, checked once
- ``blobs``      the blob checker: re-hashing data on a thread pool (``hash_bar`` its progress
                 bar, ``sealed_files`` a sealed batch's ciphertexts: each loaded only when used)
- ``lineage``    the walker: verification of an artifact and its whole lineage against a policy
                 (reads and memoises; asks ``judge``, ``trusted_log`` and ``blobs``)

Depends on the standard library and ``cryptography`` only (``sigstore``, optional, for keyless
Sigstore bundles). Copy this directory into any venv with ``cryptography`` installed and it
works.
"""
