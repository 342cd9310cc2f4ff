"""An agent program: the official ``openai`` client, two chat calls, the second extending the first.

It keeps its transcript the way SDK users do (the reply message dumped back without ``None``
fields) and leaves sampling to whoever serves it (no temperature or max_tokens of its own).
"""

import os

import openai

client = openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
messages = [{"role": "user", "content": os.environ["VF_TASK"]}]
for follow_up in ("Now say it in fewer words.", None):
    out = client.chat.completions.create(model="policy", messages=messages)
    reply = out.choices[0].message.model_dump(exclude_none=True)
    print(reply.get("content"))
    if follow_up is not None:
        messages += [reply, {"role": "user", "content": follow_up}]
client.close()
