from kakehashi_cli.main import main

main()
