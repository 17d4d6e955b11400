// sdk_task.mjs - one task of one library harness (the Claude Agent SDK's query(), the
// OpenAI Agents SDK, the Vercel AI SDK, LangChain JS) against a base URL, run as its own process so that the test can watch
// every connection it opens (strace) and nothing of one SDK leaks into another.
//
//   node sdk_task.mjs <task> <origin>      e.g. node sdk_task.mjs vercel-anthropic-text http://127.0.0.1:4100
//
// <origin> is scheme://host:port; each task adds the path its SDK's docs say the base URL
// has. Prints one JSON line {"task", "text"} (text: the model's answer as the SDK returns
// it; structured tasks print the object as JSON) and exits 0; any error exits 1 with the
// message on stderr. The API key is $HARNESS_API_KEY.
const [task, origin] = process.argv.slice(2);
const KEY = process.env.HARNESS_API_KEY;
const PROMPT = 'Reply with the word the system under test answers.';
if (!task || !origin || !KEY) {
  console.error('usage: HARNESS_API_KEY=K node sdk_task.mjs <task> <origin>');
  process.exit(2);
}

/** The tasks: each resolves to the answer's text. */
const tasks = {
  // Claude Agent SDK: query() runs its bundled Claude Code, which reads ANTHROPIC_BASE_URL
  // and ANTHROPIC_API_KEY from options.env (the test's clean environment). The model is
  // Claude Code's default unless $HARNESS_MODEL names one.
  'claude-agent-sdk': () => claudeAgentSdk(),

  // OpenAI Agents SDK: its default model API (Responses), and chat completions.
  'openai-agents-default': () => openaiAgents(null),
  'openai-agents-chat': () => openaiAgents('chat_completions'),

  // Vercel AI SDK: the providers' default APIs (@ai-sdk/openai defaults to Responses).
  'vercel-anthropic-text': () => vercel('anthropic', 'text'),
  'vercel-anthropic-stream': () => vercel('anthropic', 'stream'),
  'vercel-anthropic-object': () => vercel('anthropic', 'object'),
  'vercel-openai-text': () => vercel('openai', 'text'),
  'vercel-openai-stream': () => vercel('openai', 'stream'),
  'vercel-openai-object': () => vercel('openai', 'object'),
  'vercel-openai-chat-text': () => vercel('openai.chat', 'text'),

  // LangChain JS: ChatAnthropic and ChatOpenAI (chat completions by default).
  'langchain-anthropic': () => langchain('anthropic', false),
  'langchain-anthropic-stream': () => langchain('anthropic', true),
  'langchain-openai': () => langchain('openai', false),
  'langchain-openai-stream': () => langchain('openai', true),
  // ... structured output in json-schema mode (Anthropic output_config.format, OpenAI
  // response_format json_schema), and ChatOpenAI on the Responses API.
  'langchain-anthropic-object': () => langchain('anthropic', 'object'),
  'langchain-openai-object': () => langchain('openai', 'object'),
  'langchain-openai-responses': () => langchain('openai-responses', false),
};

async function claudeAgentSdk() {
  const { query } = await import('@anthropic-ai/claude-agent-sdk');
  const env = { ...process.env, ANTHROPIC_BASE_URL: origin, ANTHROPIC_API_KEY: KEY };
  const options = { env, cwd: process.cwd(), maxTurns: 1, settingSources: [], persistSession: false };
  if (process.env.HARNESS_MODEL) options.model = process.env.HARNESS_MODEL;
  for await (const message of query({ prompt: PROMPT, options })) {
    if (message.type !== 'result') continue;
    if (message.is_error || message.subtype !== 'success')
      throw new Error(`result ${message.subtype}: ${message.result ?? JSON.stringify(message.errors)}`);
    return message.result;
  }
  throw new Error('query() ended without a result message');
}

async function openaiAgents(api) {
  process.env.OPENAI_AGENTS_DISABLE_TRACING = '1';
  const { Agent, run, setTracingDisabled } = await import('@openai/agents');
  const { setDefaultOpenAIClient, setOpenAIAPI } = await import('@openai/agents-openai');
  const OpenAI = (await import('openai')).default;
  setTracingDisabled(true);
  setDefaultOpenAIClient(new OpenAI({ apiKey: KEY, baseURL: `${origin}/v1`, maxRetries: 0 }));
  if (api) setOpenAIAPI(api);
  const agent = new Agent({ name: 'harness', instructions: 'Answer briefly.', model: 'gpt-4o-mini' });
  const result = await run(agent, PROMPT);
  return result.finalOutput;
}

async function vercel(provider, mode) {
  const ai = await import('ai');
  const { z } = await import('zod');
  let model;
  if (provider === 'anthropic') {
    const { createAnthropic } = await import('@ai-sdk/anthropic');
    model = createAnthropic({ apiKey: KEY, baseURL: `${origin}/v1` })('claude-sonnet-4-5');
  } else {
    const { createOpenAI } = await import('@ai-sdk/openai');
    const openai = createOpenAI({ apiKey: KEY, baseURL: `${origin}/v1` });
    model = provider === 'openai.chat' ? openai.chat('gpt-4o-mini') : openai('gpt-4o-mini');
  }
  const common = { model, prompt: PROMPT, maxRetries: 0 };
  if (mode === 'text') return (await ai.generateText(common)).text;
  if (mode === 'stream') {
    // streamText reports a failed request through onError, not by throwing.
    let failure = null;
    const result = ai.streamText({ ...common, onError: ({ error }) => { failure = error; } });
    let text = '';
    for await (const delta of result.textStream) text += delta;
    if (failure) throw failure;
    return text;
  }
  const { object } = await ai.generateObject({ ...common, schema: z.object({ answer: z.string() }) });
  return JSON.stringify(object);
}

/** `mode`: false (invoke), true (stream) or 'object' (withStructuredOutput, json-schema mode). */
async function langchain(provider, mode) {
  let chat;
  if (provider === 'anthropic') {
    const { ChatAnthropic } = await import('@langchain/anthropic');
    chat = new ChatAnthropic({ apiKey: KEY, anthropicApiUrl: origin, model: 'claude-sonnet-4-5',
                               maxRetries: 0 });
  } else {
    const { ChatOpenAI } = await import('@langchain/openai');
    chat = new ChatOpenAI({ apiKey: KEY, configuration: { baseURL: `${origin}/v1` },
                            model: 'gpt-4o-mini', maxRetries: 0,
                            ...(provider === 'openai-responses' ? { useResponsesApi: true } : {}) });
  }
  if (mode === 'object') {
    const { z } = await import('zod');
    const structured = chat.withStructuredOutput(z.object({ answer: z.string() }),
                                                 { method: 'jsonSchema', name: 'answer' });
    return JSON.stringify(await structured.invoke(PROMPT));
  }
  if (!mode) {
    // The Responses API answers a list of content blocks; invoke's text is their text.
    const message = await chat.invoke(PROMPT);
    return typeof message.content === 'string' ? message.content : message.text;
  }
  let text = '';
  for await (const chunk of await chat.stream(PROMPT)) text += chunk.content;
  return text;
}

if (!tasks[task]) {
  console.error(`sdk_task.mjs: unknown task "${task}" (one of: ${Object.keys(tasks).join(', ')})`);
  process.exit(2);
}
try {
  const text = await tasks[task]();
  console.log(JSON.stringify({ task, text }));
} catch (err) {
  console.error(`sdk_task.mjs: ${task}: ${err && err.stack ? err.stack : err}`);
  process.exit(1);
}
