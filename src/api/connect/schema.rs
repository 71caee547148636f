//! The descriptor pool of everything served over Connect (`tenure.v1`, the
//! health service) and of the error details (`google.rpc`), built once at
//! start from the descriptor sets the server already embeds for
//! reflection; and the conversions of one message between the proto3 JSON
//! mapping and binary protobuf, done generically from the descriptors.

use bytes::Bytes;
use prost::Message;
use prost_reflect::{
    DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor, MethodDescriptor,
    SerializeOptions,
};

/// The JSON mapping of replies: canonical proto3 JSON (lowerCamelCase
/// names, enum names, 64-bit integers as strings, default values left out).
const SERIALIZE: SerializeOptions = SerializeOptions::new();
/// Requests: unknown fields are ignored, as protobuf ignores them, so a
/// client built from a newer proto can call an older server.
const DESERIALIZE: DeserializeOptions = DeserializeOptions::new().deny_unknown_fields(false);

/// The services and messages Connect calls can use.
pub struct Schema {
    /// Every file of the served services and the error details.
    pool: DescriptorPool,
}

impl Schema {
    /// The pool of `tenure.v1`, `grpc.health.v1` and `google.rpc`.
    pub fn load() -> Result<Schema, String> {
        let mut pool = DescriptorPool::new();
        for (what, set) in [
            ("tenure.v1", crate::proto::FILE_DESCRIPTOR_SET),
            ("grpc.health.v1", tonic_health::pb::FILE_DESCRIPTOR_SET),
            ("google.rpc", tonic_types::pb::FILE_DESCRIPTOR_SET),
        ] {
            // Files already in the pool (the well-known types each set
            // carries) are skipped by name.
            pool.decode_file_descriptor_set(set)
                .map_err(|e| format!("the {what} descriptors do not load: {e}"))?;
        }
        Ok(Schema { pool })
    }

    /// The method at `path` (`/package.Service/Method`), if served.
    pub fn method(&self, path: &str) -> Option<MethodDescriptor> {
        let (service, method) = path.strip_prefix('/')?.split_once('/')?;
        if service.starts_with("grpc.reflection.") {
            // Reflection is for gRPC tools; its one method streams requests.
            return None;
        }
        self.pool
            .get_service_by_name(service)?
            .methods()
            .find(|m| m.name() == method)
    }

    /// `json` (one proto3 JSON object; empty means `{}`) as the binary
    /// protobuf of message `kind`.
    pub fn json_to_proto(kind: &MessageDescriptor, json: &[u8]) -> Result<Vec<u8>, String> {
        let json = if json.iter().all(u8::is_ascii_whitespace) {
            b"{}".as_slice()
        } else {
            json
        };
        let mut de = serde_json::Deserializer::from_slice(json);
        let message = DynamicMessage::deserialize_with_options(kind.clone(), &mut de, &DESERIALIZE)
            .and_then(|m| de.end().map(|()| m))
            .map_err(|e| e.to_string())?;
        Ok(message.encode_to_vec())
    }

    /// The binary protobuf `bytes` of message `kind` as proto3 JSON.
    pub fn proto_to_json(kind: &MessageDescriptor, bytes: Bytes) -> Result<Vec<u8>, String> {
        let message = DynamicMessage::decode(kind.clone(), bytes).map_err(|e| e.to_string())?;
        to_json(&message)
    }

    /// An error detail (`google.protobuf.Any`) as a message, when its type
    /// is known: the `debug` form of a Connect error detail (serialized as
    /// canonical proto3 JSON).
    pub fn detail(&self, type_name: &str, value: &[u8]) -> Option<DynamicMessage> {
        let kind = self.pool.get_message_by_name(type_name)?;
        DynamicMessage::decode(kind, value).ok()
    }
}

/// `message` as canonical proto3 JSON.
fn to_json(message: &DynamicMessage) -> Result<Vec<u8>, String> {
    let mut ser = serde_json::Serializer::new(Vec::new());
    message
        .serialize_with_options(&mut ser, &SERIALIZE)
        .map_err(|e| e.to_string())?;
    Ok(ser.into_inner())
}
