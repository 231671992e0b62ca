"""The SQS endpoint of the gateway (docs/sqs.md): SQS's API on Tideway's queue model.

``endpoint`` (the HTTP entry: signature, protocol, answer), ``signature`` (SigV4), ``protocol`` (JSON 1.0 and the
query protocol), ``actions`` (the table of actions), ``queues`` and ``messages`` (the actions), ``common``,
``digests`` (MD5s as SQS computes them).
"""
