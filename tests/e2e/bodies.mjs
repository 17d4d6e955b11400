// bodies.mjs - the Anthropic request bodies the emulator's SDK tests (emu.test.mjs) and the
// proxy's (proxy_sdk.test.mjs) both send, in the emulator's model names.

// One user message, room for 200 output tokens.
export const ask = { model: 'claude-emu-1', max_tokens: 200,
                     messages: [{ role: 'user', content: 'Hello, Claude' }] };

// The countTokens example of Anthropic's documentation: 14 input tokens.
export const countExample = { model: 'claude-emu-1', system: 'You are a scientist',
                              messages: [{ role: 'user', content: 'Hello, Claude' }] };

// `ask` with the tool get_level forced: the answer is one tool_use block.
export const forcedTool = {
  ...ask,
  tools: [{ name: 'get_level', description: 'Water level at a gate',
            input_schema: { type: 'object', properties: { gate: { type: 'string' } },
                            required: ['gate'] } }],
  tool_choice: { type: 'tool', name: 'get_level' },
};
