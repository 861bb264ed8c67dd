<?php
// Classes shared by corpus.php and check.php: both sides must know the same
// classes so that unserialize() builds real objects, not __PHP_Incomplete_Class.
//
// PHP 8.1+ deprecates implementing Serializable without __serialize(); the
// deprecation is raised when the class is declared, so callers set
// error_reporting(E_ALL & ~E_DEPRECATED) before requiring this file.

namespace App\Bridge {
    class Point
    {
        public $x;
        protected $y;
        private $z;

        public function __construct($x = 1, $y = 2, $z = 3)
        {
            $this->x = $x;
            $this->y = $y;
            $this->z = $z;
        }
    }

    class Base
    {
        private $secret = 'base secret';
        protected $shared = 'shared';
        public $pub = 'public';
    }

    class Child extends Base
    {
        private $secret = 'child secret';
        public $extra = [1, 2];
    }

    class Node
    {
        public $value;
        public $next = null;

        public function __construct($value = null)
        {
            $this->value = $value;
        }
    }

    #[\AllowDynamicProperties]
    class Bag
    {
    }

    class Typed
    {
        public int $n = 7;
        public ?string $s = null;
        public float $f = 1.5;
        public array $list = ['a'];
        public string $uninitialized;
    }

    // Serializable only: PHP writes C:. (Deprecated since 8.1, still supported.)
    class Legacy implements \Serializable
    {
        public $data;

        public function __construct($data = null)
        {
            $this->data = $data;
        }

        public function serialize()
        {
            return serialize($this->data);
        }

        public function unserialize($data)
        {
            $this->data = unserialize($data);
        }
    }

    // __serialize() may return any array: int keys land in O: as i: keys.
    class Magic
    {
        public $a = 1;

        public function __serialize(): array
        {
            return ['a' => $this->a, 0 => 'zero', 5 => 'five', 'k' => [1.5, null]];
        }

        public function __unserialize(array $data): void
        {
            $this->a = $data['a'];
        }
    }

    enum Status
    {
        case Active;
        case Inactive;
    }

    enum Suit: string
    {
        case Hearts = 'H';
        case Spades = 'S';
    }

    enum Level: int
    {
        case Low = 1;
        case High = 10;
    }
}

namespace App\Jobs {
    // A Laravel job, as an application would write it (only when Illuminate loads).
    if (trait_exists(\Illuminate\Bus\Queueable::class)
        && trait_exists(\Illuminate\Queue\SerializesModels::class)) {
        class ProcessPodcast implements \Illuminate\Contracts\Queue\ShouldQueue
        {
            use \Illuminate\Bus\Queueable;
            use \Illuminate\Queue\InteractsWithQueue;
            use \Illuminate\Queue\SerializesModels;

            public $podcastId;
            protected $options;
            private $token;

            public function __construct($podcastId, array $options, $token)
            {
                $this->podcastId = $podcastId;
                $this->options = $options;
                $this->token = $token;
            }

            public function handle()
            {
            }
        }
    }
}
