"""The OpenAI Responses wire format, as plain JSON-ready dicts.

One concern per module: ``errors`` (HTTP error bodies and retry headers), ``request`` (validating
``POST /responses``), ``items`` (messages), ``response`` (the response object), ``events`` (stream
events), ``sse`` (framing). The ``openai`` client's pydantic types are used only to validate what these
builders produce, never as the internal model. Import the submodules directly; nothing is re-exported
here so importing the package stays cheap.
"""
