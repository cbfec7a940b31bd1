import PushWorkerCLI

await PushWorkerCommand.runAndExit()
