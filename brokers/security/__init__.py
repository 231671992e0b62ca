"""Who may talk to a broker and what they may touch.

* ``keys``: API key and service key strings, and the deployment's cluster secret;
* ``acl``: scopes and queue-name patterns (one definition, shared with the gateway);
* ``names``: tenants' own names <-> broker-side names (``orders`` <-> ``t2.orders``);
* ``handshake``: the mutual HMAC proof internal peers authenticate with;
* ``principal``: the authenticated caller of a connection.
"""
