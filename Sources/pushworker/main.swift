import PushWorkerCLI

AllocatorSettings.apply()
await PushWorkerCommand.runAndExit()
