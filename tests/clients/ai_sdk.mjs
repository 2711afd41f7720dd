// Drives the service with the Vercel AI SDK exactly as a user writes it, and prints one JSON object.
//
//   RESILIENT_CLIENT_BASE_URL=http://127.0.0.1:7071/v1 node tests/clients/ai_sdk.mjs <provider> <scenario>
//
// provider: "openai" (@ai-sdk/openai, openai.responses(model)) or "open-responses" (@ai-sdk/open-responses).
// scenario: generate | stream | previous | tools | tools-stream | tools-nostore | image | file | mcp-approval
//           | mcp-approval-stream
// tests/clients/test_ai_sdk.py runs it and asserts on the JSON. An SDK error is printed as
// {"error": ...} with the status and body the service answered, and the exit code is 1.
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenResponses } from "@ai-sdk/open-responses";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const baseURL = process.env.RESILIENT_CLIENT_BASE_URL;
if (!baseURL) {
  console.error("set RESILIENT_CLIENT_BASE_URL (e.g. http://127.0.0.1:7071/v1)");
  process.exit(2);
}
const [providerName, scenario] = process.argv.slice(2);
const MODEL = "research-agent";
// Only the offline agent's knobs (see resilient/agents/research.py): short answers, fast tests.
const KNOBS = { research_phases: "2", words_per_phase: "6" };

const openaiProvider = createOpenAI({ baseURL, apiKey: "local" });
const openResponses = createOpenResponses({ name: "resilient", url: `${baseURL}/responses`, apiKey: "local" });
const model = providerName === "open-responses" ? openResponses(MODEL) : openaiProvider.responses(MODEL);
const providerKey = providerName === "open-responses" ? "resilient" : "openai";
const options = (extra = {}) => ({ [providerKey]: { ...(providerName === "openai" ? { metadata: KNOBS } : {}), ...extra } });

// The tool the offline agent calls when offered one: it answers with a marker the final text must quote.
const executed = [];
const tools = {
  lookup: tool({
    description: "Look up facts about a topic.",
    inputSchema: z.object({ query: z.string() }),
    execute: async ({ query }) => {
      executed.push(query);
      return `FACT-${executed.length}: durable timers survive restarts`;
    },
  }),
};

// A 1x1 PNG and a one-page PDF, sent as bytes (the SDK turns them into data URLs).
const PNG = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==", "base64");
const PDF = Buffer.from(
  "%PDF-1.1\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
  + "2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n"
  + "3 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] >> endobj\n"
  + "trailer << /Root 1 0 R >>\n%%EOF\n");

function summary(result, extra = {}) {
  return {
    text: result.text,
    finishReason: result.finishReason,
    steps: result.steps.map((step) => ({
      finishReason: step.finishReason,
      toolCalls: step.toolCalls.map((c) => ({ name: c.toolName, input: c.input })),
      toolResults: step.toolResults.map((r) => ({ name: r.toolName, output: r.output })),
      responseId: step.response?.id ?? null,
    })),
    executed,
    ...extra,
  };
}

async function streamed(args) {
  // streamText reports a failed request to onError and ends the stream: rethrow it, as the user would see it.
  const errors = [];
  const result = streamText({ ...args, onError: ({ error }) => errors.push(error) });
  const chunks = [];
  for await (const chunk of result.textStream) chunks.push(chunk);
  const [text, finishReason, steps] = await Promise.all([result.text, result.finishReason, result.steps]);
  if (errors.length) throw errors[0];
  return summary({ text, finishReason, steps }, { textChunks: chunks.length });
}

// The SDK's tool approval with its default store: true: the second request resends the history with an
// item_reference to the stored mcp_approval_request and an mcp_approval_response, without previousResponseId.
// The offline agent asks before its last phase when metadata.require_approval is "true".
async function approvalLoop(run) {
  const prompt = "What do durable timers do?";
  const providerOptions = { openai: { metadata: { ...KNOBS, require_approval: "true" } } };
  const first = await run({ model, prompt, providerOptions });
  const requests = first.content.filter((part) => part.type === "tool-approval-request");
  const second = await run({
    model, providerOptions,
    messages: [
      { role: "user", content: prompt },
      ...first.response.messages,
      { role: "tool", content: requests.map((request) => ({
        type: "tool-approval-response", approvalId: request.approvalId, approved: true,
        providerExecuted: true })) },  // an MCP tool runs on the service: the SDK sends the answer there
    ],
  });
  return summary(second, {
    first: { text: first.text, finishReason: first.finishReason, responseId: first.response.id,
             approvals: requests.map((request) => request.approvalId),
             toolCalls: first.toolCalls.map((c) => c.toolName) },
    requestBody: second.request?.body ?? null,
  });
}

const scenarios = {
  generate: async () => summary(await generateText({ model, prompt: "Say hello", providerOptions: options() })),
  stream: async () => streamed({ model, prompt: "Count from 1 to 5", providerOptions: options() }),
  previous: async () => {
    const first = await generateText({ model, prompt: "Remember the word papaya", providerOptions: options() });
    const second = await generateText({
      model, prompt: "Which word did I ask you to remember?",
      providerOptions: options({ previousResponseId: first.response.id }),
    });
    return summary(second, { firstResponseId: first.response.id });
  },
  tools: async () => summary(await generateText({
    model, prompt: "What do durable timers do?", tools, stopWhen: stepCountIs(4), providerOptions: options(),
  })),
  "tools-stream": async () => streamed({
    model, prompt: "What do durable timers do?", tools, stopWhen: stepCountIs(4), providerOptions: options(),
  }),
  "tools-nostore": async () => summary(await generateText({
    model, prompt: "What do durable timers do?", tools, stopWhen: stepCountIs(4),
    providerOptions: options({ store: false }),
  })),
  image: async () => summary(await generateText({
    model, providerOptions: options(),
    messages: [{ role: "user", content: [
      { type: "text", text: "What is in this image?" },
      { type: "image", image: PNG, mediaType: "image/png" },
    ] }],
  })),
  "mcp-approval": async () => approvalLoop(generateText),
  "mcp-approval-stream": async () => approvalLoop(async (args) => {  // streamText's results, awaited
    const result = streamText(args);
    await result.consumeStream();
    const [text, finishReason, content, response, steps, request] = await Promise.all([
      result.text, result.finishReason, result.content, result.response, result.steps, result.request]);
    return { text, finishReason, content, response, steps, request,
             toolCalls: content.filter((part) => part.type === "tool-call") };
  }),
  file: async () => summary(await generateText({
    model, providerOptions: options(),
    messages: [{ role: "user", content: [
      { type: "text", text: "What is the title of this document?" },
      { type: "file", data: PDF, mediaType: "application/pdf", filename: "note.pdf" },
    ] }],
  })),
};

if (!["openai", "open-responses"].includes(providerName) || !(scenario in scenarios)) {
  console.error(`usage: node ai_sdk.mjs openai|open-responses ${Object.keys(scenarios).join("|")}`);
  process.exit(2);
}
try {
  console.log(JSON.stringify(await scenarios[scenario]()));
} catch (error) {
  const cause = error?.lastError ?? error;
  console.log(JSON.stringify({
    error: String(error?.message ?? error),
    status: cause?.statusCode ?? null,
    body: cause?.responseBody ?? null,
    executed,
  }));
  process.exit(1);
}
