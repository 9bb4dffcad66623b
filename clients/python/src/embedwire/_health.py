"""The standard gRPC health check (``grpc.health.v1.Health/Check``) without a dependency.

grpcio-health-checking would register ``grpc/health/v1/health.proto`` in protobuf's
default descriptor pool; defining the two messages here in a *private* pool keeps the
client free of that package and of any clash with a program that does import it.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_FIELD = descriptor_pb2.FieldDescriptorProto


def _build_messages() -> tuple[type[Any], type[Any]]:
    """Builds HealthCheckRequest and HealthCheckResponse as in the standard proto."""
    file = descriptor_pb2.FileDescriptorProto(
        name="embedwire_private/grpc_health_v1.proto", package="grpc.health.v1", syntax="proto3"
    )
    request = file.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", number=1, type=_FIELD.TYPE_STRING, label=_FIELD.LABEL_OPTIONAL)
    response = file.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for number, name in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        status.value.add(name=name, number=number)
    response.field.add(
        name="status",
        number=1,
        type=_FIELD.TYPE_ENUM,
        type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
        label=_FIELD.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")),
    )


HealthCheckRequest, HealthCheckResponse = _build_messages()


def check_method(channel: Any) -> Any:
    """The unary multi-callable for Health/Check on a sync or aio channel."""
    return channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=HealthCheckRequest.SerializeToString,
        response_deserializer=HealthCheckResponse.FromString,
    )


#: ServingStatus.SERVING: the server's model is loaded and it takes calls.
SERVING = 1


def status_name(response: Any) -> str:
    """``"SERVING"``, ``"NOT_SERVING"``, ... for a HealthCheckResponse."""
    return HealthCheckResponse.DESCRIPTOR.fields_by_name["status"].enum_type.values_by_number[
        response.status
    ].name
