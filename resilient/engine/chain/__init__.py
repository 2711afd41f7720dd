"""A response's place on its chain, what a new turn may refer to, and a response's life outside its run.

* ``turns``: registering a turn behind the turns ahead of it, and steering them.
* ``chainlock``: the pure state machine of the per-chain ``chain_lock`` Durable entity.
* ``lifecycle``: reading as a client may, cancelling, deleting; ``refusals``: the answers these rules give
  instead of a result, which the HTTP layer maps to statuses.
* ``continuation``, ``references``: what a new turn's input may answer or name (tool outputs, approvals,
  typed answers, item references), checked before the turn is accepted.
* ``conversations``, ``conversation_items``: the Conversations API's rules over the chain.
* ``snapshot``: the public response object from a row and its checkpointed items.
"""
