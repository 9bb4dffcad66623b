"""Generated protobuf and gRPC code for the ``embedwire.v1`` proto package.

Everything but this file is written by ``clients/python/generate.py``; do not edit it.
"""
