"""`make demo`: train PPO on CartPole-v1 headless with a progress bar, save the run, load the
agent back from disk and play three episodes with it."""

import workbench as wb

agent = wb.PPO("CartPole-v1")
session = wb.Session(agent, "CartPole-v1", seed=0)
session.run(steps=100_000, progress=True)
print(f"trained: {session.status}, {session.steps} steps, {session.episodes} episodes")

path = session.save("runs/demo")
print(f"saved to {path}")

player = wb.load(path)  # play mode: deterministic, no exploration, no learning
returns = player.play("CartPole-v1", episodes=3, seed=0)
for i, r in enumerate(returns, 1):
    print(f"episode {i}: return {r:.0f}")
