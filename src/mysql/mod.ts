/**
 * MySQL layer: table catalogue, schema, value adjustment and statement texts.
 *
 * @module
 */
export * from "./catalogue.ts";
export * from "./ddl.ts";
export * from "./schema.ts";
export * from "./sql.ts";
export * from "./url.ts";
export * from "./values.ts";
