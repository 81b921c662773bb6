"""Image observations end to end: train DQN on an Atari game (or MinAtar, the CPU-sized one) for a few
thousand steps, save it, load it back and play an episode with its frames.

    python examples/atari.py                      # ALE/Breakout-v5 (pip install 'rl-workbench[atari]')
    python examples/atari.py MinAtar/Breakout-v1  # 10x10 frames (pip install 'rl-workbench[minatar]')
    python examples/atari.py ALE/Pong-v5 20000    # another game, another budget

An Atari id gets the rl-zoo's preprocessing (gymnasium's AtariPreprocessing, episodic life and clipped
rewards for learning, FIRE at reset, 4 stacked 84x84 frames; episode_reward and play report whole games'
raw scores: docs/observations.md); the agent then builds the
Nature CNN (printed in its repr), keeps the frames as uint8 in its replay memory and scales them by
1/255 inside the network. A few thousand steps show the machinery, not a trained player.
"""

import sys

import workbench as wb

env_id = sys.argv[1] if len(sys.argv) > 1 else "ALE/Breakout-v5"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5_000

agent = wb.DQN(
    env_id,
    buffer_size=20_000,
    learning_starts=1_000,
    train_freq=4,
    gradient_steps=1,
    target_update_interval=500,
    learning_rate=1e-4,
    batch_size=32,
    net_arch=(),
    optimize_memory_usage=True,
    exploration=wb.EpsilonGreedy(1.0, 0.05, 0.5),
)
print(agent)  # ... encoder=nature_cnn(4x84x84 CHW uint8) ...
session = wb.Session(agent, env_id, seed=0)
session.run(steps=steps, progress=True)
print(
    f"trained {session.steps} steps, {session.episodes} episodes; "
    f"replay memory {agent.memory.nbytes() / 2**20:.0f} MiB of {agent.memory.obs.dtype} frames"
)

path = session.save("runs/atari")
player = wb.load(path)
returns, frames = player.play(env_id, episodes=1, seed=0, render="rgb_array", max_steps=2_000)
print(f"played one episode: return {returns[0]:.0f}, {len(frames[0])} frames of shape {frames[0][0].shape}")
