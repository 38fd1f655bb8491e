// Typed payloads. An ExecuteRequest carries the tool's message packed in google.protobuf.Any;
// the client finds the message's schema in a registry (the built-in tool payloads and Struct,
// plus any `payloadTypes` you give the client) and packs it with anyPack.
import {
  type DescMessage,
  type JsonObject,
  type Message,
  type Registry,
  create,
  createRegistry,
  fromJson,
} from "@bufbuild/protobuf";
import { type Any, StructSchema, anyPack } from "@bufbuild/protobuf/wkt";
import { ChargeCardSchema, SendEmailSchema, type ChargeCard, type SendEmail } from "./gen/effectgate/tools/v1/tools_pb.js";

export function payloadRegistry(extra: DescMessage[] = []): Registry {
  return createRegistry(ChargeCardSchema, SendEmailSchema, StructSchema, ...extra);
}

export function pack(registry: Registry, payload: Message): Any {
  const schema = registry.getMessage(payload.$typeName);
  if (schema === undefined) {
    throw new Error(`payload type ${payload.$typeName} is unknown to this client: pass its schema in payloadTypes`);
  }
  return anyPack(schema, payload);
}

type Init<T> = Partial<Omit<T, "$typeName" | "$unknown">>;

/** A ChargeCard (amount in minor units: bigint or number). */
export function chargeCard(init: Omit<Init<ChargeCard>, "amount"> & { amount: bigint | number }): ChargeCard {
  return create(ChargeCardSchema, { ...init, amount: BigInt(init.amount) });
}

export function sendEmail(init: Init<SendEmail>): SendEmail {
  return create(SendEmailSchema, init);
}

/** A google.protobuf.Struct from plain JSON, for tools of the generic http adapter. */
export function struct(json: JsonObject): Message {
  return fromJson(StructSchema, json);
}
