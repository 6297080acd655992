#!/bin/bash
# Sourced on the GPU machine by the experiments' gpu.sh: install the wheels carried in .whl/ into /tmp/site
# (perfbot itself runs from this working tree, not from its wheel) and put a `bot` command on the PATH.
wheels=$(ls .whl/*.whl | grep -v '/perfbot-')
# shellcheck disable=SC2086  # one wheel per word
python3 -m pip install -q --no-index --no-deps --target /tmp/site $wheels 2>&1 | grep -v "already exists" | tail -2
mkdir -p /tmp/site/bin
printf '#!/bin/sh\nexec python3 -m bot.cli "$@"\n' > /tmp/site/bin/bot
chmod +x /tmp/site/bin/bot
export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH
